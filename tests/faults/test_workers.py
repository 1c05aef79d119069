"""Faults injected for real into real worker processes (FAKE engine, SQLite or PostgreSQL):
two workers share one job, ``kill -9`` mid-trial, SIGTERM mid-trial. Each test asserts what
survived: trials lost 0, trials measured twice 0."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.faults.faultkit import (
    engine_groups,
    group_alive,
    running_trial,
    start_worker,
    stop,
    submit,
    survivors,
    wait_for,
)
from tuner.storage import Store

pytestmark = pytest.mark.timeout(300)


def test_two_workers_share_one_job(any_db_url: str, tmp_path: Path):
    url = any_db_url
    job_id = submit(url, tmp_path, trials=8)
    work = tmp_path / "work"
    a = start_worker(url, work, "A", devices="0")
    b = None
    try:
        wait_for(lambda: running_trial(url, job_id), 60, "A's first trial")
        b = start_worker(url, work, "B", devices="1")  # joins mid-job
        wait_for(lambda: Store(url).job(job_id).state == "succeeded", 240, "the job to end")
    finally:
        codes = [stop(p) for p in (a, b) if p is not None]
    assert codes == [130, 130]  # both drained on SIGTERM
    got = survivors(url, job_id)
    assert got["lost"] == 0 and got["duplicated"] == 0, got
    assert got["optuna_states"].count("RUNNING") == 0
    assert len(got["optuna_states"]) == 8  # the budget, shared, never overrun
    assert Store(url).job(job_id).trials_started == 8
    # both ran trials, each on its own devices (recorded on CPU)
    assert got["workers"] == [("A", "0"), ("B", "1")], got
    rows = Store(url).trials(job_id)
    baselines = [r for r in rows if r.method == "none" and r.reused_from is None]
    assert len(baselines) == 1  # a queued start point went to one worker only
    assert engine_groups(work) == []


def test_kill_9_mid_trial_loses_and_duplicates_nothing(any_db_url: str, tmp_path: Path):
    url = any_db_url
    job_id = submit(url, tmp_path, trials=4, tokens=80)
    work = tmp_path / "work"
    a = start_worker(url, work, "A")
    b = None
    try:
        victim = wait_for(lambda: running_trial(url, job_id), 60, "a running trial")
        pgids = wait_for(lambda: engine_groups(work), 30, "the engine's pid file")
        stop(a, signal.SIGKILL)
        (pgid,) = pgids
        assert group_alive(pgid)  # kill -9 orphaned the engine: nothing tore it down
        b = start_worker(url, work, "B")
        wait_for(lambda: not group_alive(pgid), 30, "B to stop A's engine")
        wait_for(lambda: Store(url).job(job_id).state == "succeeded", 240, "the job to end")
    finally:
        for p in (a, b):
            if p is not None:
                stop(p)
    got = survivors(url, job_id)
    assert got["lost"] == 0 and got["duplicated"] == 0, got
    assert got["interrupted"] == [victim.number]
    assert list(got["retries"].values()) == [victim.number]  # retried once
    (retry,) = got["retries"]
    assert Store(url).trial(job_id, retry).state in ("complete", "pruned")
    assert not Store(url).trial(job_id, victim.number).measurements
    assert engine_groups(work) == []


def test_sigterm_mid_trial_requeues_and_the_next_worker_finishes(db_url: str, tmp_path: Path):
    url = db_url
    job_id = submit(url, tmp_path, trials=3, tokens=80)
    work = tmp_path / "work"
    a = start_worker(url, work, "A")
    try:
        victim = wait_for(lambda: running_trial(url, job_id), 60, "a running trial")
        (pgid,) = wait_for(lambda: engine_groups(work), 30, "the engine's pid file")
    finally:
        assert stop(a, signal.SIGTERM) == 130
    assert not group_alive(pgid)  # the engine was stopped before the worker left
    job = Store(url).job(job_id)
    assert job.state == "queued" and job.claimed_by is None
    row = Store(url).trial(job_id, victim.number)
    assert row.state == "fail" and row.fail_reason == "interrupted"
    b = start_worker(url, work, "B")
    try:
        wait_for(lambda: Store(url).job(job_id).state == "succeeded", 240, "the job to end")
    finally:
        stop(b)
    got = survivors(url, job_id)
    assert got["lost"] == 0 and got["duplicated"] == 0, got
    assert list(got["retries"].values()) == [victim.number]
