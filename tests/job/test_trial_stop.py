"""A worker asked to stop between Optuna's ask and the trial's start: the asked trial is
put back for a retry (its slot with it), never silently lost. A trial of a job cancelled or
ended meanwhile is not put back: Optuna's record says it never ran."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuner.measure import JobCancelled, JobControl
from tuner.recovery import NOT_RUN_ATTR
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
    attrs: dict[tuple[int, str], str] = {}
    storage = SimpleNamespace(set_trial_system_attr=lambda t, k, v: attrs.update({(t, k): v}))
    with pytest.raises(JobCancelled):
        runner(SimpleNamespace(number=7, _trial_id=70, storage=storage))  # type: ignore[arg-type]
    assert runner.interrupted == []  # the user cancelled: nothing runs again
    assert attrs == {(70, NOT_RUN_ATTR): "its job had ended or was cancelled first"}
