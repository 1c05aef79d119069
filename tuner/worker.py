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
from pathlib import Path

from tuner.job import JobControl, run_job
from tuner.storage import Store

__all__ = ["Worker"]

log = logging.getLogger("spectune.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class _Heartbeat(threading.Thread):
    """Keeps the claim alive and turns a cancel request in the database into
    ``JobControl.cancel()`` (the API may run in another process than the worker)."""

    def __init__(
        self, store: Store, job_id: int, worker_id: str, control: JobControl, every_s: float
    ) -> None:
        super().__init__(name=f"spectune-heartbeat-{job_id}", daemon=True)
        self.store, self.job_id, self.worker_id = store, job_id, worker_id
        self.control, self.every_s = control, every_s
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            try:
                wants_cancel = self.store.heartbeat(self.job_id, self.worker_id)
                if wants_cancel is None:
                    return  # the claim is lost (job deleted or re-claimed)
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
        store: Store,
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
        self.store, self.work_dir = store, work_dir
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
        job_id = self.store.claim_next(self.worker_id, stale_after_s=self.stale_after_s)
        if job_id is None:
            return None
        control = JobControl()
        with self._lock:
            self._control, self._job_id = control, job_id
        beat = _Heartbeat(self.store, job_id, self.worker_id, control, self.heartbeat_s)
        beat.start()
        log.info("worker %s: running job %s", self.worker_id, job_id)
        try:
            run_job(
                self.store, job_id, work_dir=self.work_dir, launcher=self.launcher, control=control
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
        if self.store.release_claim(job_id, requeue_if_stopped=self._stop.is_set()):
            log.info("job %s: back in the queue (worker stopped)", job_id)

    def run_forever(self) -> None:
        self.store.ensure_schema()
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
