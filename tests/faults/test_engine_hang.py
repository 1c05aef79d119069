"""An engine that hangs is killed and its trial failed with the reason: past its start-up
timeout (``startup_timeout``), or on requests that never answer (each request times out at
``request_timeout_s``; the trial fails instead of storing a point with no data)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.faults.faultkit import HERE, engine_groups, submit, survivors
from tests.helpers import fake_measurers
from tuner.job import WorkerContext, run_job
from tuner.storage import Store

pytestmark = pytest.mark.timeout(180)


def _run(url: str, tmp_path: Path, hang: str, **kw: float) -> int:
    job_id = submit(url, tmp_path, trials=1, **kw)
    launcher = [sys.executable, str(HERE / "hang_engine.py"), "--hang", hang]
    Store(url).claim_next("test")
    run_job(
        Store(url),
        job_id,
        work_dir=tmp_path / "work",
        measurers=fake_measurers(launcher),
        worker=WorkerContext(worker_id="test", heartbeat_s=1, grace_s=30, poll_s=0.2),
    )
    assert engine_groups(tmp_path / "work") == []  # every hung engine was killed
    return job_id


def test_engine_hung_at_start_is_killed_and_the_trial_fails(db_url: str, tmp_path: Path):
    job_id = _run(db_url, tmp_path, "start", startup=2)
    rows = Store(db_url).trials(job_id)
    assert [r.fail_reason for r in rows] == ["startup_timeout"]
    assert "not ready after 2 s" in rows[0].fail_detail
    got = survivors(db_url, job_id)
    assert got["state"] == "succeeded" and got["lost"] == 0 and got["duplicated"] == 0


def test_engine_hung_on_requests_is_killed_and_the_trial_fails(db_url: str, tmp_path: Path):
    job_id = _run(db_url, tmp_path, "requests", request_timeout=1)
    rows = Store(db_url).trials(job_id)
    assert [(r.state, r.fail_reason) for r in rows] == [("fail", "measurement")]
    assert "every request failed" in rows[0].fail_detail and "timeout" in rows[0].fail_detail
    got = survivors(db_url, job_id)
    assert got["lost"] == 0 and got["duplicated"] == 0
