"""A real PostgreSQL server restarted under a running worker process (FAKE engine): the
worker reconnects (pool pre-ping, writes retried with backoff) and the job ends with every
trial of its budget, none lost to the restarts and none measured twice.

The cluster is this module's own (tests/pg_server.py), so restarting it disturbs no other
test's database."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.faultkit import running_trial, start_worker, stop, submit, survivors, wait_for
from tests.pg_server import PgServer, PgUnavailable
from tuner.storage import Store, get_engine

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def own_pg() -> Iterator[PgServer]:
    try:
        server = PgServer()
        server.start()
        # The shared test clusters trade durability for speed (synchronous_commit off), so a
        # crash there loses acknowledged commits by design; this one keeps them, as any
        # production server does, so that a lost result would be the product's fault.
        with open(server.data_dir / "postgresql.conf", "a") as f:
            f.write("synchronous_commit = 'on'\n")
        server.restart()
    except PgUnavailable as e:
        pytest.skip(f"no PostgreSQL server to restart: {e}")
    yield server
    server.destroy()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_database_restart_mid_job_loses_nothing(own_pg: PgServer, tmp_path: Path, mode: str):
    url = own_pg.create_database()
    job_id = submit(url, tmp_path, trials=4, tokens=60)
    w = start_worker(url, tmp_path / "work", "A", stale_after_s=20)
    try:
        first = wait_for(lambda: running_trial(url, job_id), 60, "a running trial")
        own_pg.restart(mode)  # mid-trial: every connection of the worker drops
        get_engine(url).dispose()  # this test's own pooled connections, too
        wait_for(
            lambda: (r := running_trial(url, job_id)) is not None and r.number > first.number,
            120,
            "the next trial",
        )
        own_pg.restart(mode)  # again, at another point of the trial's life
        get_engine(url).dispose()
        wait_for(lambda: Store(url).job(job_id).state == "succeeded", 240, "the job to end")
    finally:
        assert stop(w, signal.SIGTERM) == 130
    got = survivors(url, job_id)
    assert got["lost"] == 0 and got["duplicated"] == 0, got
    assert got["interrupted"] == [] and got["retries"] == {}, got  # no trial was lost
    assert len(got["optuna_states"]) == 4 and set(got["optuna_states"]) <= {"COMPLETE", "PRUNED"}
