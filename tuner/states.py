"""The states a job and a trial can be in: one list for the store, the worker, the API, the
light client and (checked by a test) the web UI.

Standard library only: ``tuner.client`` imports it and must stay light. ``StrEnum`` members
compare equal to the strings stored in the database and sent over the API, so a row read
back as ``"succeeded"`` is ``JobState.SUCCEEDED``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["JOB_ENDED", "TRIAL_FINISHED", "JobState", "TrialState"]


class JobState(StrEnum):
    """A tuning job, as ``spectune_jobs.state`` stores it."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TrialState(StrEnum):
    """A trial: Optuna's names in lower case. ``spectune_trials.state`` stores the first four;
    ``WAITING`` (enqueued in Optuna, not started, so no row yet) appears only in the trial
    read model and the counts."""

    RUNNING = "running"
    COMPLETE = "complete"
    PRUNED = "pruned"
    FAIL = "fail"
    WAITING = "waiting"


# A job in one of these never runs again; a worker stops helping, a client stops waiting.
JOB_ENDED: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
)
# A trial in one of these has its result (or its failure) stored: never measured again.
TRIAL_FINISHED: frozenset[TrialState] = frozenset(
    {TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL}
)
