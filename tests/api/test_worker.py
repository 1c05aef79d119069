"""The job worker: atomic claims, resume after a dead worker, cancel and stop (FAKE engine)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import optuna
import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import inspect

from tests.helpers import (
    FAKE_LAUNCHER,
    FAKE_PRESET,
    fake_measurers,
    make_preset_dir,
    make_settings,
)
from tuner.api import create_app
from tuner.job import create_job
from tuner.space import loads_space
from tuner.storage import JobModel, Store, current_revision, get_engine, upgrade, utcnow
from tuner.storage._db import _alembic_config, session_scope
from tuner.worker import Worker


@pytest.fixture
def svc(tmp_path, any_db_url):
    s = make_settings(tmp_path, database_url=any_db_url)  # SQLite and PostgreSQL
    with TestClient(create_app(s, run_worker=False)) as c:
        yield c, s


def _submit(c, **kw) -> int:
    r = c.post("/api/jobs", json={"preset": "fake-small", **kw})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _state(url: str, job_id: int) -> str:
    return Store(url).job(job_id).state


def _wait(pred, timeout_s: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_each_job_is_claimed_by_exactly_one_worker(svc):
    c, s = svc
    ids = [_submit(c) for _ in range(3)]
    claims: list[tuple[str, int | None]] = []
    barrier = threading.Barrier(6)

    def grab(name: str) -> None:
        barrier.wait()
        claims.append((name, Store(s.database_url).claim_next(name)))

    threads = [threading.Thread(target=grab, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = [j for _, j in claims if j is not None]
    assert sorted(got) == ids  # every job once, none twice
    assert sum(j is None for _, j in claims) == 3
    rows = {j.job_id: j for j in Store(s.database_url).list_jobs()[0]}
    for name, j in claims:
        if j is not None:
            assert rows[j].state == "running" and rows[j].claimed_by == name
    assert Store(s.database_url).claim_next("late") is None


def test_jobs_from_the_command_line_are_not_claimed(svc, tmp_path):
    _, s = svc
    space = loads_space(FAKE_PRESET, base_dir=s.search_spaces_dir)
    store = Store(s.database_url)
    create_job(store, space)  # what `spectune run` does before running it itself
    assert store.claim_next("w") is None


def test_a_dead_workers_job_is_resumed_after_its_heartbeat_stops(svc):
    c, s = svc
    job_id = _submit(c, trials=3)
    url = s.database_url
    store = Store(url)
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=url)
    orphan = study.ask()  # the trial the dead worker had started
    # What the dead worker had written (storage internals: no Store method fakes a claim).
    with session_scope(url) as sess:
        job = sess.get(JobModel, job_id)
        job.state, job.claimed_by, job.heartbeat_at = "running", "dead-host:1", utcnow()
    store.add_trial(
        job_id,
        orphan.number,
        method="none",
        params={"method": "none"},
        engine_config={},
        engine_key="x",
    )
    # its heartbeat is fresh: nobody may take it
    assert store.claim_next("w2", stale_after_s=s.worker_stale_after_s) is None
    with session_scope(url) as sess:
        sess.get(JobModel, job_id).heartbeat_at = utcnow() - timedelta(seconds=120)
    w = Worker(
        store,
        work_dir=s.work_dir,
        measurers=fake_measurers(FAKE_LAUNCHER),
        heartbeat_s=0.5,
        stale_after_s=2,
    )
    assert w.run_once() == job_id
    job = c.get(f"/api/jobs/{job_id}").json()
    # the lost trial is failed and run once more; the budget still buys 3 measured trials
    assert job["state"] == "succeeded" and job["trials_done"] == 4
    trials = c.get(f"/api/jobs/{job_id}/trials").json()["items"]
    assert trials[0]["state"] == "fail" and trials[0]["fail_reason"] == "interrupted"
    assert [t["state"] for t in trials[1:]] == ["complete", "complete", "complete"]
    done = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=url).trials
    assert [t.system_attrs.get("failed_trial") for t in done].count(orphan.number) == 1
    assert store.job(job_id).claimed_by is None


SLOW = FAKE_PRESET.replace("max_tokens: 12", "max_tokens: 300").replace(
    "name: fake-engine-test", "name: fake-slow"
)


@pytest.fixture
def slow(tmp_path, any_db_url):
    make_preset_dir(tmp_path, SLOW)
    s = make_settings(tmp_path, database_url=any_db_url)
    with TestClient(create_app(s, run_worker=False)) as c:
        yield c, s


def _first_trial_running(c, job_id: int):
    def pred() -> bool:
        j = c.get(f"/api/jobs/{job_id}").json()
        return j["state"] == "running" and j["current_trial"] is not None

    return pred


def test_cancel_through_the_api_stops_the_running_engine(slow):
    c, s = slow
    job_id = _submit(c, trials=3)
    w = Worker(
        Store(s.database_url),
        work_dir=s.work_dir,
        measurers=fake_measurers(FAKE_LAUNCHER),
        heartbeat_s=0.3,
        stale_after_s=5,
        poll_s=0.1,
    )
    w.start()
    try:
        _wait(_first_trial_running(c, job_id), what="the first trial")
        t0 = time.monotonic()
        r = c.post(f"/api/jobs/{job_id}/cancel")
        assert r.status_code == 202 and r.json()["cancel_requested"] is True
        _wait(lambda: _state(s.database_url, job_id) == "cancelled", what="cancelled")
        assert time.monotonic() - t0 < 15
    finally:
        w.stop()
    job = c.get(f"/api/jobs/{job_id}").json()
    assert job["state"] == "cancelled" and job["trials_done"] < 3
    trials = c.get(f"/api/jobs/{job_id}/trials").json()["items"]
    assert trials[-1]["fail_reason"] == "cancelled"
    assert c.post(f"/api/jobs/{job_id}/cancel").status_code == 409


def test_stopping_a_worker_puts_its_job_back_in_the_queue(slow):
    c, s = slow
    job_id = _submit(c, trials=2)
    w = Worker(
        Store(s.database_url),
        work_dir=s.work_dir,
        measurers=fake_measurers(FAKE_LAUNCHER),
        heartbeat_s=0.3,
        stale_after_s=5,
        poll_s=0.1,
    )
    w.start()
    _wait(_first_trial_running(c, job_id), what="the first trial")
    w.stop()
    assert not w.alive
    store = Store(s.database_url)
    job = store.job(job_id)
    assert job.state == "queued" and job.claimed_by is None and job.error is None
    assert store.request_cancel(job_id).state == "cancelled"  # still cancellable


def test_service_migration_upgrades_and_downgrades(any_db_url):
    url = any_db_url
    upgrade(url, "v0.1.0.a")
    service_cols = {"for_worker", "idempotency_key", "claimed_by", "heartbeat_at"}

    def cols() -> set[str]:
        get_engine(url).dispose()
        return {c["name"] for c in inspect(get_engine(url)).get_columns("spectune_jobs")}

    assert not service_cols & cols()
    upgrade(url, "v0.2.0.a")
    assert current_revision(url) == "v0.2.0.a" and service_cols <= cols()
    command.downgrade(_alembic_config(url), "v0.1.0.a")
    assert current_revision(url) == "v0.1.0.a" and not service_cols & cols()


def test_workers_migration_upgrades_and_downgrades(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url, "v0.5.0.a")

    def cols(table: str) -> set[str]:
        get_engine(url).dispose()
        return {c["name"] for c in inspect(get_engine(url)).get_columns(table)}

    assert "trials_started" not in cols("spectune_jobs")
    upgrade(url, "v0.5.0.b")
    assert current_revision(url) == "v0.5.0.b" and "trials_started" in cols("spectune_jobs")
    assert {"worker_id", "devices"} <= cols("spectune_trials")
    command.downgrade(_alembic_config(url), "v0.5.0.a")
    assert "trials_started" not in cols("spectune_jobs")
    assert not {"worker_id", "devices"} & cols("spectune_trials")
