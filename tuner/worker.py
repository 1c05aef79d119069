"""The job worker: claims queued jobs from the database and runs them, one at a time.

Why one at a time: a trial owns the device (GPU memory, or the CPU cores on the embedded
default), so two engines side by side would measure each other. More devices, more workers.

Claiming is a compare-and-set: ``UPDATE … SET state='running' WHERE job_id=? AND
state='queued'`` succeeds for exactly one worker. On PostgreSQL the candidate row is read with
``SELECT … FOR UPDATE SKIP LOCKED`` so concurrent workers do not queue on the same row; on
SQLite (one writer at a time) the conditional UPDATE alone is atomic.

A worker that dies stops its heartbeat; after ``stale_after_s`` any worker re-claims the job
and ``run_job`` resumes it (finished trials kept, the interrupted one failed). A worker that
is stopped cleanly puts its job back in the queue the same way.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sqlalchemy import and_, or_, select, update

from tuner.storage import JobModel, ensure_schema, session_scope, utcnow
from tuner.study import JobControl, run_job

__all__ = ["Worker", "claim_next", "request_cancel", "CancelResult"]

log = logging.getLogger("spectune.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _claimable(stale_before):  # noqa: ANN001, ANN202
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


def claim_next(url: str, worker_id: str, *, stale_after_s: float = 60.0) -> int | None:
    """Claim the oldest claimable job for ``worker_id``; None when the queue is empty."""
    stale_before = utcnow() - timedelta(seconds=stale_after_s)
    with session_scope(url) as s:
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


@dataclass(frozen=True)
class CancelResult:
    """``state`` after the request; ``accepted`` False when the job had already ended."""

    found: bool
    accepted: bool
    state: str | None


def request_cancel(url: str, job_id: int) -> CancelResult:
    """Cancel a queued job at once; ask the worker of a running one to stop its engine."""
    with session_scope(url) as s:
        res = s.execute(
            update(JobModel)
            .where(JobModel.job_id == job_id, JobModel.state == "queued")
            .values(state="cancelled", finished_at=utcnow(), error="cancelled before it started")
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


class _Heartbeat(threading.Thread):
    """Keeps the claim alive and turns a cancel request in the database into
    ``JobControl.cancel()`` (the API may run in another process than the worker)."""

    def __init__(
        self, url: str, job_id: int, worker_id: str, control: JobControl, every_s: float
    ) -> None:
        super().__init__(name=f"spectune-heartbeat-{job_id}", daemon=True)
        self.url, self.job_id, self.worker_id = url, job_id, worker_id
        self.control, self.every_s = control, every_s
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            try:
                with session_scope(self.url) as s:
                    job = s.get(JobModel, self.job_id)
                    if job is None or job.claimed_by != self.worker_id:
                        return
                    job.heartbeat_at = utcnow()
                    wants_cancel = job.cancel_requested
                if wants_cancel and not self.control.cancelled:
                    log.info("job %s: cancel requested", self.job_id)
                    self.control.cancel()
            except Exception:  # a missed beat is not worth killing the job for
                log.exception("job %s: heartbeat failed", self.job_id)


class Worker:
    """Claims and runs jobs until stopped.

    ``launcher`` is for tests only: it swaps the engine command for the FAKE OpenAI server
    (tests/fake_openai_server.py). It is a constructor argument, never a setting or an
    environment variable, so the product cannot report fake numbers by accident.
    """

    def __init__(
        self,
        url: str,
        *,
        work_dir: Path = Path(".spectune"),
        worker_id: str | None = None,
        poll_s: float = 2.0,
        heartbeat_s: float = 5.0,
        stale_after_s: float = 60.0,
        launcher: list[str] | None = None,
    ) -> None:
        if stale_after_s <= 2 * heartbeat_s:
            raise ValueError("stale_after_s must exceed two heartbeats")
        self.url, self.work_dir = url, work_dir
        self.worker_id = worker_id or default_worker_id()
        self.poll_s, self.heartbeat_s, self.stale_after_s = poll_s, heartbeat_s, stale_after_s
        self.launcher = launcher
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._control: JobControl | None = None
        self._job_id: int | None = None
        self._thread: threading.Thread | None = None

    @property
    def current_job(self) -> int | None:
        return self._job_id

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run_once(self) -> int | None:
        """Claim one job and run it to its end; the job id, or None if nothing was queued."""
        job_id = claim_next(self.url, self.worker_id, stale_after_s=self.stale_after_s)
        if job_id is None:
            return None
        control = JobControl()
        with self._lock:
            self._control, self._job_id = control, job_id
        beat = _Heartbeat(self.url, job_id, self.worker_id, control, self.heartbeat_s)
        beat.start()
        log.info("worker %s: running job %s", self.worker_id, job_id)
        try:
            run_job(
                self.url, job_id, work_dir=self.work_dir, launcher=self.launcher, control=control
            )
        except Exception:
            log.exception("job %s failed", job_id)  # run_job has stored the error
        finally:
            beat.done.set()
            beat.join(timeout=self.heartbeat_s + 5)
            with self._lock:
                self._control, self._job_id = None, None
            self._release(job_id)
        return job_id

    def _release(self, job_id: int) -> None:
        """Drop the claim; a job stopped by ``stop()`` (not by a user) goes back to the queue."""
        with session_scope(self.url) as s:
            job = s.get(JobModel, job_id)
            if job is None:
                return
            if self._stop.is_set() and job.state == "cancelled" and not job.cancel_requested:
                job.state = "queued"
                job.error = None
                job.finished_at = None
                log.info("job %s: back in the queue (worker stopped)", job_id)
            job.claimed_by = None
            job.heartbeat_at = None

    def run_forever(self) -> None:
        ensure_schema(self.url)
        while not self._stop.is_set():
            try:
                ran = self.run_once()
            except Exception:
                log.exception("worker %s: claim failed", self.worker_id)
                ran = None
            if ran is None:
                self._stop.wait(self.poll_s)

    def start(self) -> threading.Thread:
        """Run in a background thread (the embedded worker of ``spectune serve``)."""
        self._thread = threading.Thread(target=self.run_forever, name="spectune-worker")
        self._thread.daemon = True
        self._thread.start()
        return self._thread

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the engine in flight and put its job back in the queue."""
        self._stop.set()
        with self._lock:
            control = self._control
        if control is not None:
            control.cancel()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
