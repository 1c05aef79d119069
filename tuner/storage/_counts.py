"""Aggregates for the service's ``/metrics``: counted in the database at scrape time, so
every worker's jobs count, whichever process ran them."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select

from tuner.storage._db import session_scope
from tuner.storage._models import JobModel, TrialModel, utcnow

__all__ = ["ServiceCounts", "service_counts"]


@dataclass(frozen=True)
class ServiceCounts:
    jobs_by_state: dict[str, int] = field(default_factory=dict)
    trials_by_state: dict[str, int] = field(default_factory=dict)
    engine_launches: int = 0
    confirm_launches: int = 0
    # worker id -> seconds since its last heartbeat on the job it holds
    heartbeat_age_s: dict[str, float] = field(default_factory=dict)


def service_counts(url: str) -> ServiceCounts:
    with session_scope(url) as s:
        jobs = dict(s.execute(select(JobModel.state, func.count()).group_by(JobModel.state)).all())
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
            .where(JobModel.state == "running", JobModel.claimed_by.is_not(None))
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
