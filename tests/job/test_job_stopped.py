"""A job that ends cancelled or failed tells the integrations (MLflow ends its parent run
KILLED or FAILED instead of leaving it RUNNING)."""

from __future__ import annotations

import pytest

import tuner.job as job_mod
from tests.fake_space import _space, make_space_dir
from tuner.job import JobControl, create_job, run_job
from tuner.storage import Store


def test_a_cancelled_and_a_failed_job_are_reported_to_the_integrations(tmp_path, monkeypatch):
    d = make_space_dir(tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'j.db'}")
    seen: list[tuple[int, str]] = []
    monkeypatch.setattr(job_mod, "on_job_stopped", lambda s, j, status: seen.append((j, status)))
    control = JobControl()
    control.cancel()
    cancelled = create_job(store, _space(d, trials=2))
    assert run_job(store, cancelled, work_dir=tmp_path / "w", control=control).state == "cancelled"

    def boom(*a, **k):
        raise RuntimeError("trial loop broke")

    monkeypatch.setattr(job_mod, "_run_trials", boom)
    failed = create_job(store, _space(d, trials=2))
    with pytest.raises(RuntimeError, match="trial loop broke"):
        run_job(store, failed, work_dir=tmp_path / "w")
    assert seen == [(cancelled, "cancelled"), (failed, "failed")]
