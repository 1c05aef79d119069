"""The one door to the database: a ``Store`` binds a URL once and owns every session.

As Optuna's ``RDBStorage`` holds its scoped session and finders, ``Store`` holds ours: the
finders raise one ``JobNotFound``, the writes of jobs, trials and references live here, and so
does the one read model of a trial (``_records.py``). No other module opens a session.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session, selectinload

from tuner.space import SearchSpace, parse_space
from tuner.storage._db import ensure_schema, session_scope
from tuner.storage._models import JobModel, ReferenceModel, utcnow
from tuner.storage._records import RecordQueries
from tuner.storage._trials import TrialQueries

__all__ = ["CancelResult", "JobNotFound", "Store", "space_of_job", "study_name_for"]


class JobNotFound(LookupError):
    """No job with that id in this database (the one way a missing job is reported)."""


def study_name_for(job_id: int) -> str:
    return f"spectune-job-{job_id}"


def space_of_job(job: JobModel) -> SearchSpace:
    """The search space a job was stored with (paths resolve against its folder)."""
    data = dict(job.space)
    base = Path(data.pop("base_dir", "."))
    data.pop("hardware", None)
    return parse_space(data, base_dir=base, source=f"(job {job.job_id})")


@dataclass(frozen=True)
class CancelResult:
    """``state`` after the request; ``accepted`` False when the job had already ended."""

    found: bool
    accepted: bool
    state: str | None


def _claimable(stale_before: Any) -> Any:
    """Queued API jobs, and running ones whose worker stopped its heartbeat."""
    return and_(
        JobModel.for_worker.is_(True),
        or_(
            JobModel.state == "queued",
            and_(
                JobModel.state == "running",
                JobModel.claimed_by.is_not(None),
                JobModel.heartbeat_at < stale_before,
            ),
        ),
    )


class Store(TrialQueries, RecordQueries):
    """SpecTune's tables and the Optuna studies beside them, in one database."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @contextmanager
    def session(self) -> Iterator[Session]:
        with session_scope(self.url) as s:
            yield s

    def ensure_schema(self) -> None:
        ensure_schema(self.url)

    # ------------------------------------------------------------------ studies

    def load_study(
        self, job_id: int, sampler: optuna.samplers.BaseSampler | None = None
    ) -> optuna.Study:
        return optuna.load_study(
            study_name=study_name_for(job_id), storage=self.url, sampler=sampler
        )

    # ------------------------------------------------------------------ jobs

    def create_job(
        self,
        space: SearchSpace,
        data: dict[str, Any],
        *,
        space_yaml: str | None,
        n_trials: int,
    ) -> int:
        """A queued job row and its Optuna study; nothing is kept half-way."""
        self.ensure_schema()
        with self.session() as s:
            job = JobModel(
                name=space.name,
                study_name=f"pending-{time.time_ns()}",
                state="queued",
                space=data,
                space_yaml=space_yaml,
                n_trials=n_trials,
            )
            s.add(job)
            s.flush()
            job.study_name = study_name_for(job.job_id)
            job_id = job.job_id
        try:
            optuna.create_study(
                storage=self.url,
                study_name=study_name_for(job_id),
                directions=[o.resolved_direction for o in space.objectives],
            )
        except BaseException:
            self.delete_job(job_id)
            raise
        return job_id

    def delete_job(self, job_id: int) -> None:
        """Remove a job and its study (one this process created but must not keep)."""
        try:
            optuna.delete_study(study_name=study_name_for(job_id), storage=self.url)
        except KeyError:
            pass
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is not None:
                s.delete(job)

    def job(self, job_id: int, *, with_trials: bool = False) -> JobModel:
        """The job row, detached (with its trials loaded when asked); JobNotFound if none."""
        opts = [selectinload(JobModel.trials)] if with_trials else []
        with self.session() as s:
            job = s.get(JobModel, job_id, options=opts)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            return job

    def space(self, job_id: int) -> SearchSpace:
        return space_of_job(self.job(job_id))

    def list_jobs(
        self, *, offset: int = 0, limit: int | None = None, state: str | None = None
    ) -> tuple[list[JobModel], int]:
        """Newest first, with their trials loaded; and the total count for that filter."""
        with self.session() as s:
            q = select(JobModel)
            count = select(func.count(JobModel.job_id))
            if state is not None:
                q, count = q.where(JobModel.state == state), count.where(JobModel.state == state)
            total = s.scalar(count) or 0
            q = q.options(selectinload(JobModel.trials)).order_by(JobModel.job_id.desc())
            rows = s.scalars(q.offset(offset).limit(limit)).all()
            return list(rows), total

    def succeeded_jobs(self, *, except_job: int) -> list[JobModel]:
        """Finished jobs other than ``except_job``, newest first (warm-start candidates)."""
        with self.session() as s:
            q = (
                select(JobModel)
                .where(JobModel.job_id != except_job, JobModel.state == "succeeded")
                .order_by(JobModel.job_id.desc())
            )
            return list(s.scalars(q).all())

    def latest_job_named(self, name: str) -> int | None:
        """The newest job with this name (a recorder resumes its own job)."""
        with self.session() as s:
            q = select(JobModel.job_id).where(JobModel.name == name)
            return s.scalars(q.order_by(JobModel.job_id.desc())).first()

    def set_trial_budget(self, job_id: int, n_trials: int) -> None:
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            job.n_trials = n_trials

    def start_job(self, job_id: int) -> JobModel:
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            job.state = "running"
            job.started_at = utcnow()
            return job

    def end_job(self, job_id: int, state: str, error: str | None) -> None:
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is not None:
                job.state = state
                job.error = error
                job.finished_at = utcnow()

    def count_launch(self, job_id: int, startup_s: float, *, confirm: bool = False) -> None:
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            if confirm:
                job.confirm_launches += 1
            else:
                job.engine_launches += 1
            job.engine_startup_s += startup_s

    # ------------------------------------------------------------------ the service

    def job_by_idempotency_key(self, key: str) -> tuple[int, str | None] | None:
        with self.session() as s:
            row = s.execute(
                select(JobModel.job_id, JobModel.request_sha256).where(
                    JobModel.idempotency_key == key
                )
            ).first()
        return None if row is None else (row[0], row[1])

    def release_to_workers(self, job_id: int, *, key: str | None, digest: str) -> None:
        """Make a job visible to workers (after its study exists), with its idempotency key."""
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            job.for_worker = True
            job.idempotency_key = key
            job.request_sha256 = digest

    def claim_next(self, worker_id: str, *, stale_after_s: float = 60.0) -> int | None:
        """Claim the oldest claimable job for ``worker_id``; None when the queue is empty.

        A compare-and-set: ``UPDATE … WHERE state='queued'`` succeeds for one worker only;
        on PostgreSQL the candidates are read ``FOR UPDATE SKIP LOCKED``."""
        stale_before = utcnow() - timedelta(seconds=stale_after_s)
        with self.session() as s:
            candidates = s.scalars(
                select(JobModel.job_id)
                .where(_claimable(stale_before))
                .order_by(JobModel.job_id)
                .limit(5)
                .with_for_update(skip_locked=True)  # PostgreSQL; SQLite renders nothing
            ).all()
            for job_id in candidates:
                res = s.execute(
                    update(JobModel)
                    .where(JobModel.job_id == job_id, _claimable(stale_before))
                    .values(state="running", claimed_by=worker_id, heartbeat_at=utcnow())
                    .execution_options(synchronize_session=False)
                )
                if res.rowcount == 1:
                    return job_id
        return None

    def request_cancel(self, job_id: int) -> CancelResult:
        """Cancel a queued job at once; flag a running one for its worker."""
        with self.session() as s:
            res = s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.state == "queued")
                .values(
                    state="cancelled", finished_at=utcnow(), error="cancelled before it started"
                )
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 1:
                return CancelResult(True, True, "cancelled")
            res = s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.state == "running")
                .values(cancel_requested=True)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 1:
                return CancelResult(True, True, "running")
            state = s.scalar(select(JobModel.state).where(JobModel.job_id == job_id))
        return CancelResult(state is not None, False, state)

    def heartbeat(self, job_id: int, worker_id: str) -> bool | None:
        """Refresh the claim; the job's cancel flag, or None when the claim is lost."""
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None or job.claimed_by != worker_id:
                return None
            job.heartbeat_at = utcnow()
            return bool(job.cancel_requested)

    def release_claim(self, job_id: int, *, requeue_if_stopped: bool) -> bool:
        """Drop a worker's claim; a job its stopping worker cancelled (not a user) goes back
        to the queue. True when it was requeued."""
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                return False
            requeued = requeue_if_stopped and job.state == "cancelled" and not job.cancel_requested
            if requeued:
                job.state = "queued"
                job.error = None
                job.finished_at = None
            job.claimed_by = None
            job.heartbeat_at = None
            return requeued

    # ------------------------------------------------------------------ references

    def reference_names(self, job_id: int) -> set[str]:
        with self.session() as s:
            q = select(ReferenceModel.name).where(ReferenceModel.job_id == job_id)
            return set(s.scalars(q))

    def add_reference(self, row: ReferenceModel) -> None:
        with self.session() as s:
            s.add(row)

    def references(self, job_id: int) -> list[ReferenceModel]:
        with self.session() as s:
            q = (
                select(ReferenceModel)
                .where(ReferenceModel.job_id == job_id)
                .order_by(ReferenceModel.name)
            )
            return list(s.scalars(q).all())
