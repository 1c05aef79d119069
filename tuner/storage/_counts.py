"""Aggregates for the service's ``/metrics`` (a mixin of ``Store``, which supplies
``session()``): counted in the database at scrape time, so every worker's jobs count,
whichever process ran them."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tuner.states import JobState
from tuner.storage._models import JobModel, TrialModel, utcnow
from tuner.storage._retry import no_retry

__all__ = ["CountQueries", "ServiceCounts"]


@dataclass(frozen=True)
class ServiceCounts:
    jobs_by_state: dict[str, int] = field(default_factory=dict)
    trials_by_state: dict[str, int] = field(default_factory=dict)
    engine_launches: int = 0
    confirm_launches: int = 0
    # worker id -> seconds since its last heartbeat on the job it holds
    heartbeat_age_s: dict[str, float] = field(default_factory=dict)


class CountQueries:
    session: Callable[[], AbstractContextManager[Session]]

    @no_retry  # a scrape answers now or fails; the next scrape counts again
    def service_counts(self) -> ServiceCounts:
        """Jobs and trials by state, engine launches, and each worker's heartbeat age."""
        with self.session() as s:
            jobs = dict(
                s.execute(select(JobModel.state, func.count()).group_by(JobModel.state)).all()
            )
            trials = dict(
                s.execute(select(TrialModel.state, func.count()).group_by(TrialModel.state)).all()
            )
            launches, confirms = s.execute(
                select(
                    func.coalesce(func.sum(JobModel.engine_launches), 0),
                    func.coalesce(func.sum(JobModel.confirm_launches), 0),
                )
            ).one()
            now = utcnow()
            beats = s.execute(
                select(JobModel.claimed_by, func.max(JobModel.heartbeat_at))
                .where(JobModel.state == JobState.RUNNING, JobModel.claimed_by.is_not(None))
                .group_by(JobModel.claimed_by)
            ).all()
        return ServiceCounts(
            jobs_by_state={str(k): int(v) for k, v in jobs.items()},
            trials_by_state={str(k): int(v) for k, v in trials.items()},
            engine_launches=int(launches),
            confirm_launches=int(confirms),
            heartbeat_age_s={
                str(w): max(0.0, (now - at).total_seconds()) for w, at in beats if at is not None
            },
        )
