"""A worker asked to stop between Optuna's ask and the trial's start: the asked trial is
put back for a retry (its slot with it), never silently lost."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuner.measure import JobCancelled, JobControl
from tuner.trial import TrialRunner


def _runner(stopping: bool) -> TrialRunner:
    control = JobControl()
    control.cancel()
    ctx = SimpleNamespace(
        control=control, space=None, worker=SimpleNamespace(stopping=lambda: stopping)
    )
    return TrialRunner(ctx, measurer=None, strategy=None)  # type: ignore[arg-type]


def test_a_trial_asked_by_a_stopping_worker_is_put_back():
    runner = _runner(stopping=True)
    with pytest.raises(JobCancelled):
        runner(SimpleNamespace(number=7))  # type: ignore[arg-type]
    assert runner.interrupted == [7]  # requeued by Recovery.requeue, its slot refunded


def test_a_trial_of_a_cancelled_job_is_not_put_back():
    runner = _runner(stopping=False)
    with pytest.raises(JobCancelled):
        runner(SimpleNamespace(number=7))  # type: ignore[arg-type]
    assert runner.interrupted == []  # the user cancelled: nothing runs again
