"""SIGTERM to a real ``spectune serve`` process (FAKE engine) mid-trial drains it: the trial
in flight is aborted and recorded, its engine stopped, the job put back in the queue, and a
worker started afterwards finishes it with nothing lost or measured twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.faultkit import (
    HERE,
    REPO,
    engine_groups,
    group_alive,
    running_trial,
    start_worker,
    stop,
    submit,
    survivors,
    wait_for,
)
from tuner.engines import free_port
from tuner.storage import Store

pytestmark = pytest.mark.timeout(300)


def test_sigterm_to_serve_drains_the_embedded_worker(db_url: str, tmp_path: Path):
    url = db_url
    job_id = submit(url, tmp_path, trials=3, tokens=80)
    work = tmp_path / "work"
    argv = [sys.executable, str(HERE / "serve_entry.py"), "--db", url, "--work-dir", str(work)]
    argv += ["--port", str(free_port())]
    log = open(tmp_path / "serve.log", "wb")  # the child process writes it
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    serve = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        victim = wait_for(lambda: running_trial(url, job_id), 60, "a running trial")
        (pgid,) = wait_for(lambda: engine_groups(work), 30, "the engine's pid file")
    finally:
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert stop(serve, signal.SIGTERM) in (0, -signal.SIGTERM)
    assert b"Application shutdown complete" in (tmp_path / "serve.log").read_bytes()
    assert not group_alive(pgid)
    assert engine_groups(work) == []
    job = Store(url).job(job_id)
    assert job.state == "queued" and job.claimed_by is None, (job.state, job.error)
    row = Store(url).trial(job_id, victim.number)
    assert row.state == "fail" and row.fail_reason == "interrupted"
    w = start_worker(url, work, "B")
    try:
        wait_for(lambda: Store(url).job(job_id).state == "succeeded", 240, "the job to end")
    finally:
        stop(w)
    got = survivors(url, job_id)
    assert got["lost"] == 0 and got["duplicated"] == 0, got
    assert list(got["retries"].values()) == [victim.number]
