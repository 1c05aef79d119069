"""Tools beside SpecTune that read its results: optuna-dashboard (which opens the same
database) and MLflow (optional). ``tuner/job.py`` and ``tuner/trial.py`` call the hooks
below, one line each, so neither knows what is attached."""

from __future__ import annotations

from typing import Any, Protocol

import optuna

from tuner.integrations._dashboard import (
    DASHBOARD_CONSTRAINTS_KEY,
    label_study,
    metric_names,
    trial_attrs,
    write_dashboard_attrs,
    write_job_summary,
)
from tuner.integrations._mlflow import (
    ENV_EXPERIMENT,
    ENV_TRACKING_URI,
    MlflowUnavailable,
    check_mlflow,
    log_job_end,
    log_job_stopped,
    log_trial,
    tracking_uri,
)
from tuner.measure import Measured
from tuner.pareto import job_report
from tuner.space import SearchSpace
from tuner.storage import Store

__all__ = [
    "DASHBOARD_CONSTRAINTS_KEY",
    "ENV_EXPERIMENT",
    "ENV_TRACKING_URI",
    "MlflowUnavailable",
    "TrialContext",
    "label_study",
    "metric_names",
    "on_job_end",
    "on_job_start",
    "on_job_stopped",
    "on_trial_stored",
    "trial_attrs",
    "tracking_uri",
]


def on_job_start(study: optuna.Study, space: SearchSpace) -> None:
    """At creation and on every (re)start: name the objectives; refuse a job that should log
    to MLflow and cannot, before any engine time is spent."""
    check_mlflow()
    label_study(study, space)


class TrialContext(Protocol):
    """What ``on_trial_stored`` needs of the job (``tuner.context.JobContext`` has it; named
    here by shape so the integrations stay below the context). Read-only: a frozen context
    satisfies it."""

    @property
    def store(self) -> Store: ...
    @property
    def job_id(self) -> int: ...
    @property
    def space(self) -> SearchSpace: ...


def on_trial_stored(
    ctx: TrialContext,
    trial: optuna.Trial,
    params: dict[str, Any],
    state: str,
    measured: Measured,
) -> None:
    """After a trial's results are stored, while Optuna still lets it take attributes
    (``params``: SpecTune's, as its tables show them, not Optuna's prefixed names)."""
    extra = measured.stored_extra()
    write_dashboard_attrs(trial, measured.points, extra, ctx.space)
    method = params.get("method")
    record = dict(number=trial.number, state=str(state), method=method, params=dict(params))
    record.update(measurements=list(measured.points), extra=extra)
    log_trial(ctx.store, ctx.job_id, ctx.space, record)


def on_job_end(store: Store, job_id: int) -> None:
    """A job that ran to its end: its winner and confirmed numbers on the study, the
    winner's exports to MLflow."""
    write_job_summary(store.load_study(job_id), job_report(store, job_id))
    log_job_end(store, job_id)


def on_job_stopped(store: Store, job_id: int, status: str) -> None:
    """A job that ended otherwise (``status``: ``cancelled`` or ``failed``, as given to
    ``store.end_job``): its MLflow parent run ends KILLED or FAILED. Never raises."""
    log_job_stopped(store, job_id, status)
