"""The job queue of the ``Store`` (a mixin: ``Store`` supplies ``session()``): claims,
heartbeats, cancel requests, and the trial budget shared by the workers on one job.

Why these are compare-and-sets (``UPDATE … WHERE``): several worker processes, on several
hosts, run them at the same time against one database; each row update decides alone.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from tuner.errors import NotFound
from tuner.states import JOB_ENDED, JobState
from tuner.storage._models import JobModel, TrialModel, utcnow
from tuner.storage._retry import retry_db

__all__ = ["CancelResult", "JobNotFound", "QueueQueries"]


class JobNotFound(NotFound):
    """No job with that id in this database (the one way a missing job is reported)."""


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
            JobModel.state == JobState.QUEUED,
            and_(
                JobModel.state == JobState.RUNNING,
                JobModel.claimed_by.is_not(None),
                JobModel.heartbeat_at < stale_before,
            ),
        ),
    )


class QueueQueries:
    session: Callable[[], AbstractContextManager[Session]]

    @retry_db
    def job_by_idempotency_key(self, key: str) -> tuple[int, str | None] | None:
        with self.session() as s:
            row = s.execute(
                select(JobModel.job_id, JobModel.request_sha256).where(
                    JobModel.idempotency_key == key
                )
            ).first()
        return None if row is None else (row[0], row[1])

    @retry_db
    def release_to_workers(self, job_id: int, *, key: str | None, digest: str) -> None:
        """Make a job visible to workers (after its study exists), with its idempotency key."""
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            job.for_worker = True
            job.idempotency_key = key
            job.request_sha256 = digest

    @retry_db
    def claim_next(self, worker_id: str, *, stale_after_s: float = 60.0) -> int | None:
        """Claim the oldest claimable job for ``worker_id``; None when the queue is empty.

        A compare-and-set: ``UPDATE … WHERE state='queued'`` succeeds for one worker only;
        on PostgreSQL the one candidate is read ``FOR UPDATE SKIP LOCKED`` (each concurrent
        claimer locks another row; locking several would hide them all from the others),
        on SQLite (no row locks) the next candidates are tried when another worker won."""
        stale_before = utcnow() - timedelta(seconds=stale_after_s)
        with self.session() as s:
            locks = s.get_bind().dialect.name != "sqlite"
            candidates = s.scalars(
                select(JobModel.job_id)
                .where(_claimable(stale_before))
                .order_by(JobModel.job_id)
                .limit(1 if locks else 5)
                .with_for_update(skip_locked=True)  # SQLite renders nothing
            ).all()
            for job_id in candidates:
                res = s.execute(
                    update(JobModel)
                    .where(JobModel.job_id == job_id, _claimable(stale_before))
                    .values(state=JobState.RUNNING, claimed_by=worker_id, heartbeat_at=utcnow())
                    .execution_options(synchronize_session=False)
                )
                if res.rowcount == 1:
                    return job_id
        return None

    @retry_db
    def joinable_job(
        self, *, stale_after_s: float = 60.0, exclude: Collection[int] = ()
    ) -> int | None:
        """The oldest running API job another worker may help with: its owner is alive
        (fresh heartbeat), it has started (its first trial row exists, so the owner has
        seeded the study), nobody asked to cancel it and its budget has slots left.
        ``exclude``: jobs the caller failed to join lately (it backs off them, not the
        others)."""
        fresh = utcnow() - timedelta(seconds=stale_after_s)
        started = select(TrialModel.trial_id).where(TrialModel.job_id == JobModel.job_id)
        with self.session() as s:
            return s.scalars(
                select(JobModel.job_id)
                .where(
                    JobModel.for_worker.is_(True),
                    JobModel.state == JobState.RUNNING,
                    JobModel.claimed_by.is_not(None),
                    JobModel.heartbeat_at >= fresh,
                    JobModel.cancel_requested.is_not(True),
                    JobModel.trials_started < JobModel.n_trials,
                    JobModel.stop_reason.is_(None),
                    started.exists(),
                    JobModel.job_id.not_in(list(exclude)),
                )
                .order_by(JobModel.job_id)
            ).first()

    @retry_db
    def abandoned_jobs(self, candidates: Collection[int], *, ended_before_s: float) -> list[int]:
        """Jobs that ended over ``ended_before_s`` ago (every worker has seen the end since)
        yet still hold a running trial: those of ``candidates`` (running in Optuna) and
        those with a running row. Their trials' workers died or stalled after the job
        ended; no job loop sweeps them any more."""
        cutoff = utcnow() - timedelta(seconds=ended_before_s)
        running_row = select(TrialModel.trial_id).where(
            TrialModel.job_id == JobModel.job_id, TrialModel.state == JobState.RUNNING
        )
        with self.session() as s:
            return list(
                s.scalars(
                    select(JobModel.job_id)
                    .where(
                        JobModel.state.in_(list(JOB_ENDED)),
                        JobModel.finished_at < cutoff,
                        or_(JobModel.job_id.in_(list(candidates)), running_row.exists()),
                    )
                    .order_by(JobModel.job_id)
                )
            )

    @retry_db
    def take_trial_slot(self, job_id: int) -> bool:
        """One trial of the budget for the caller, or False when all are taken: a
        compare-and-set, so workers sharing a job never run more trials than the budget."""
        with self.session() as s:
            res = s.execute(
                update(JobModel)
                .where(
                    JobModel.job_id == job_id,
                    JobModel.trials_started < JobModel.n_trials,
                    JobModel.stop_reason.is_(None),
                )
                .values(trials_started=JobModel.trials_started + 1)
                .execution_options(synchronize_session=False)
            )
            return res.rowcount == 1

    @retry_db
    def trial_slots_left(self, job_id: int) -> int:
        """Slots of the budget no worker took yet; 0 once the search stopped."""
        with self.session() as s:
            row = s.execute(
                select(JobModel.n_trials, JobModel.trials_started, JobModel.stop_reason).where(
                    JobModel.job_id == job_id
                )
            ).first()
        return 0 if row is None or row[2] is not None else max(0, row[0] - row[1])

    @retry_db
    def set_stop_reason(self, job_id: int, reason: str) -> None:
        """Close the search (no worker takes another slot) and say why; called again when
        the job ends, to add the confirmation's outcome."""
        with self.session() as s:
            s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id)
                .values(stop_reason=reason[:2000])
                .execution_options(synchronize_session=False)
            )

    @retry_db
    def reopen_search(self, job_id: int) -> bool:
        """Open a closed search again while budget is left (a confirmation overturned what
        it closed on); False when no slot is left, and then nothing changes."""
        with self.session() as s:
            res = s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.trials_started < JobModel.n_trials)
                .values(stop_reason=None)
                .execution_options(synchronize_session=False)
            )
            return res.rowcount == 1

    @retry_db
    def set_offline_prices(self, job_id: int, prices: dict[str, Any]) -> None:
        """Keep the offline prices the search used (``OfflinePrices.to_json``)."""
        with self.session() as s:
            s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id)
                .values(offline_prices=prices)
                .execution_options(synchronize_session=False)
            )

    @retry_db
    def refund_trial_slot(self, job_id: int) -> None:
        """Give back a slot whose trial will run again (a retry of a lost trial)."""
        with self.session() as s:
            s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.trials_started > 0)
                .values(trials_started=JobModel.trials_started - 1)
                .execution_options(synchronize_session=False)
            )

    @retry_db
    def trial_slots_taken(self, job_id: int) -> int:
        with self.session() as s:
            n = s.scalar(select(JobModel.trials_started).where(JobModel.job_id == job_id))
        return int(n or 0)

    @retry_db
    def give_back_trial_slots(self, job_id: int, *, taken: int, used: int) -> bool:
        """Slots taken by a worker that died before it asked its trial go back: a
        compare-and-set on ``taken``, so a slot taken or refunded meanwhile makes the caller
        look again. True when they went back."""
        with self.session() as s:
            res = s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.trials_started == taken)
                .values(trials_started=max(0, used))
                .execution_options(synchronize_session=False)
            )
            return res.rowcount == 1

    @retry_db
    def sync_trial_slots(self, job_id: int, started: int) -> None:
        """Resuming a job stored before slots existed: count what it already ran."""
        with self.session() as s:
            s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.trials_started < started)
                .values(trials_started=started)
                .execution_options(synchronize_session=False)
            )

    @retry_db
    def job_status(self, job_id: int) -> tuple[str, bool] | None:
        """(state, cancel requested) for a worker helping with a job it does not own."""
        with self.session() as s:
            row = s.execute(
                select(JobModel.state, JobModel.cancel_requested).where(JobModel.job_id == job_id)
            ).first()
        return None if row is None else (row[0], bool(row[1]))

    @retry_db
    def request_cancel(self, job_id: int) -> CancelResult:
        """Cancel a queued job at once; flag a running one for its worker."""
        with self.session() as s:
            res = s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.state == JobState.QUEUED)
                .values(
                    state=JobState.CANCELLED,
                    finished_at=utcnow(),
                    error="cancelled before it started",
                )
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 1:
                return CancelResult(True, True, JobState.CANCELLED)
            res = s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.state == JobState.RUNNING)
                .values(cancel_requested=True)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 1:
                return CancelResult(True, True, JobState.RUNNING)
            state = s.scalar(select(JobModel.state).where(JobModel.job_id == job_id))
        return CancelResult(state is not None, False, state)

    @retry_db
    def heartbeat(self, job_id: int, worker_id: str) -> bool | None:
        """Refresh the claim; the job's cancel flag, or None when the claim is lost."""
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None or job.claimed_by != worker_id:
                return None
            job.heartbeat_at = utcnow()
            return bool(job.cancel_requested)

    @retry_db
    def release_claim(self, job_id: int, *, requeue_if_stopped: bool) -> bool:
        """Drop a worker's claim; a job its stopping worker left (not one a user cancelled)
        goes back to the queue. True when it was requeued."""
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                return False
            requeued = (
                requeue_if_stopped
                and job.state in (JobState.RUNNING, JobState.CANCELLED)
                and not job.cancel_requested
            )
            if requeued:
                job.state = JobState.QUEUED
                job.error = None
                job.finished_at = None
            job.claimed_by = None
            job.heartbeat_at = None
            return requeued
