"""The job worker: claims queued jobs from the database and runs them; helps with running
jobs when the queue is empty.

Why one trial at a time per worker: a trial owns the device (GPU memory, or the CPU cores on
the embedded default), so two engines side by side would measure each other. More devices,
more workers: ``spectune worker --devices 0,1`` on each host, all on one database.

Claiming is a compare-and-set: ``UPDATE … SET state='running' WHERE job_id=? AND
state='queued'`` succeeds for exactly one worker, the job's owner. On PostgreSQL the candidate
row is read with ``SELECT … FOR UPDATE SKIP LOCKED`` so concurrent workers do not queue on the
same row; on SQLite (one writer at a time) the conditional UPDATE alone is atomic.

Several workers share one job through Optuna's RDB storage: a worker with nothing queued joins
a running job whose budget has slots left, and every worker takes one slot of the shared budget
per trial (``Store.take_trial_slot``), so the budget is never overrun; each queued start point
is handed to one worker by Optuna. The owner seeds the study, confirms the front and ends the
job; the helpers only run trials.

What survives a crash: each running trial beats in Optuna's heartbeat table; a trial silent
for ``stale_after_s`` is failed by any worker and run again (its slot goes back). A dead
owner stops the job's heartbeat; after ``stale_after_s`` any worker re-claims the job and
resumes it. The engine of a worker killed with ``kill -9`` is stopped by any worker on that
host (pid files under ``work_dir/run``): at start-up, while idle, and before each trial it
runs. A worker that fails to join or claim a job backs off (``_Backoff``). A worker
stopped cleanly (``stop()``, SIGTERM) aborts its trial, records it ``interrupted``, puts it
back for a retry and, if it owned the job, puts the job back in the queue.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Protocol

from tuner._repeated import RepeatedFailure, first_line
from tuner.context import MeasurerFactory, WorkerContext
from tuner.engines import reap_stale
from tuner.job import run_job
from tuner.measure import JobControl
from tuner.recovery import EndedJobSweep
from tuner.states import JOB_ENDED
from tuner.storage import Store

__all__ = ["Worker", "WorkerSettings", "worker_from_settings"]

log = logging.getLogger("spectune.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class _Heartbeat(threading.Thread):
    """The owner's beat keeps its claim alive; every worker's beat turns a cancel request in
    the database into ``JobControl.cancel()`` (the API may run in another process), and a
    helper's also stops when the job ended."""

    def __init__(
        self,
        store: Store,
        job_id: int,
        worker_id: str,
        control: JobControl,
        every_s: float,
        *,
        owner: bool,
    ) -> None:
        super().__init__(name=f"spectune-heartbeat-{job_id}", daemon=True)
        self.store, self.job_id, self.worker_id = store, job_id, worker_id
        self.control, self.every_s, self.owner = control, every_s, owner
        self.done = threading.Event()

    def _wants_cancel(self) -> bool | None:
        if self.owner:
            return self.store.heartbeat(self.job_id, self.worker_id)
        status = self.store.job_status(self.job_id)
        if status is None:
            return None
        return status[1] or status[0] in JOB_ENDED

    def run(self) -> None:
        # A read-only or lost database fails every beat alike: one traceback, then a line
        # every few minutes.
        failing = RepeatedFailure(log, f"job {self.job_id}: heartbeat")
        while not self.done.wait(self.every_s):
            try:
                wants_cancel = self._wants_cancel()
                failing.ok()
                if wants_cancel is None:
                    return  # the claim is lost (job deleted or re-claimed)
                if wants_cancel and not self.control.cancelled:
                    log.info("job %s: cancel requested", self.job_id)
                    self.control.cancel()
            except Exception as e:  # a missed beat is not worth killing the job for
                failing.failed(e)


class _Backoff:
    """Failures in a row by key (a job id; None for claiming itself): after the n-th the key
    waits ``first_s * 2**(n-1)`` seconds, at most ``max_s``. Why: a job this worker cannot
    join fails the same way at once (a seed out of range made every helper write hundreds
    of tracebacks a second), so trying again at once only burns a core and floods the log."""

    def __init__(self, first_s: float = 1.0, max_s: float = 300.0) -> None:
        self.first_s, self.max_s = first_s, max_s
        self._fails: dict[int | None, tuple[int, float]] = {}  # key: (failures, retry at)

    def failed(self, key: int | None) -> tuple[int, float]:
        """Count a failure; (failures in a row, seconds to wait)."""
        n = self._fails.get(key, (0, 0.0))[0] + 1
        delay = min(self.max_s, self.first_s * 2 ** (n - 1))
        self._fails[key] = (n, time.monotonic() + delay)
        return n, delay

    def ok(self, key: int | None) -> None:
        self._fails.pop(key, None)

    def left_s(self, key: int | None) -> float:
        return max(0.0, self._fails.get(key, (0, 0.0))[1] - time.monotonic())

    def waiting(self) -> list[int]:
        """The jobs still waiting out a failure."""
        now = time.monotonic()
        return [k for k, (_, at) in self._fails.items() if k is not None and at > now]


def _log_failure(backoff: _Backoff, key: int | None, what: str) -> None:
    """The traceback of a first failure; a short line for the next ones in a row."""
    n, delay = backoff.failed(key)
    if n == 1:
        log.exception("%s failed; next try in %.0f s", what, delay)
        return
    e = sys.exc_info()[1]
    line = first_line(e) if e is not None else "unknown error"
    log.warning("%s failed again (%d in a row; %s); next try in %.0f s", what, n, line, delay)


class Worker:
    """Claims and runs jobs, and helps with running ones, until stopped.

    ``devices`` (e.g. ``"0,1"``): the accelerators this worker's engines may use, given to
    each engine it launches and recorded on each trial it runs. ``measurers`` makes each
    job's measurer (None: the product's, ``tuner.job.default_measurer``); tests pass one
    that launches the FAKE OpenAI server (``tests.helpers.fake_measurers``). It is a
    constructor argument, never a setting or an environment variable, so the product cannot
    report fake numbers by accident.
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
        devices: str | None = None,
        join: bool = True,
        measurers: MeasurerFactory | None = None,
    ) -> None:
        if stale_after_s <= 2 * heartbeat_s:
            raise ValueError("stale_after_s must exceed two heartbeats")
        self.store, self.work_dir = store, work_dir
        self.worker_id = worker_id or default_worker_id()
        self.poll_s, self.heartbeat_s, self.stale_after_s = poll_s, heartbeat_s, stale_after_s
        self.devices, self.join, self.measurers = devices, join, measurers
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._control: JobControl | None = None
        self._job_id: int | None = None
        self._thread: threading.Thread | None = None
        self._backoff = _Backoff()
        self._ended = EndedJobSweep(store, grace_s=stale_after_s)
        self._ended_failing = RepeatedFailure(log, "sweep of ended jobs")
        self.last_job: int | None = None

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
        self._run(job_id, join=False)
        return job_id

    def help_once(self) -> int | None:
        """Join a running job with trials left and run trials until its budget is taken;
        the job id, or None when no job needs help (jobs it failed to join lately wait out
        their back-off)."""
        job_id = self.store.joinable_job(
            stale_after_s=self.stale_after_s, exclude=self._backoff.waiting()
        )
        if job_id is None:
            return None
        self._run(job_id, join=True)
        return job_id

    def _run(self, job_id: int, *, join: bool) -> None:
        control = JobControl()
        with self._lock:
            self._control, self._job_id = control, job_id
        beat = _Heartbeat(
            self.store, job_id, self.worker_id, control, self.heartbeat_s, owner=not join
        )
        beat.start()
        log.info("worker %s: %s job %s", self.worker_id, "helping" if join else "running", job_id)
        ctx = WorkerContext(
            worker_id=self.worker_id,
            devices=self.devices,
            heartbeat_s=self.heartbeat_s,
            grace_s=self.stale_after_s,
            poll_s=self.poll_s,
            stopping=self._stop.is_set,
        )
        try:
            run_job(
                self.store,
                job_id,
                work_dir=self.work_dir,
                measurers=self.measurers,
                control=control,
                worker=ctx,
                join=join,
            )
        except Exception:  # an owner's run_job has stored the error; a helper's stores none
            _log_failure(self._backoff, job_id, f"job {job_id} ({'join' if join else 'run'})")
        else:
            self._backoff.ok(job_id)
        finally:
            beat.done.set()
            beat.join(timeout=self.heartbeat_s + 5)
            with self._lock:
                self._control, self._job_id = None, None
            if not join:
                self._release(job_id)

    def _release(self, job_id: int) -> None:
        """Drop the claim; a job left by ``stop()`` (not by a user) goes back to the queue."""
        if self.store.release_claim(job_id, requeue_if_stopped=self._stop.is_set()):
            log.info("job %s: back in the queue (worker stopped)", job_id)

    def _sweep_ended(self) -> None:
        """Fail the trials left running in ended jobs (``EndedJobSweep``); a failing sweep
        is logged, never the worker's end."""
        try:
            self._ended()
        except Exception as e:
            self._ended_failing.failed(e)
        else:
            self._ended_failing.ok()

    def reap(self) -> list[int]:
        """Stop the engines that workers of this host left running when they died."""
        killed = reap_stale(self.work_dir / "run")
        for pgid in killed:
            log.warning("stopped engine process group %s left by a dead worker", pgid)
        return killed

    def run_forever(self) -> None:
        """Claim, else help, else reap dead workers' engines and wait ``poll_s``; a failing
        claim waits longer each time in a row."""
        self.store.ensure_schema()
        self.reap()
        while not self._stop.is_set():
            try:
                ran = self.run_once()
                if ran is None and self.join and not self._stop.is_set():
                    ran = self.help_once()
            except Exception:
                _log_failure(self._backoff, None, f"worker {self.worker_id}: claim")
                ran = None
            else:
                self._backoff.ok(None)
            if ran is None:
                self.reap()  # an engine whose worker died here meanwhile: now, not at restart
                self._sweep_ended()
                self._stop.wait(max(self.poll_s, self._backoff.left_s(None)))

    def _once(self) -> None:
        self.store.ensure_schema()
        self.reap()
        self.last_job = self.run_once()

    def start(self, *, once: bool = False) -> threading.Thread:
        """Run in a background thread (the embedded worker of ``spectune serve``); with
        ``once``, run one queued job (if any, its id in ``last_job``) and end."""
        target = self._once if once else self.run_forever
        self._thread = threading.Thread(target=target, name="spectune-worker")
        self._thread.daemon = True
        self._thread.start()
        return self._thread

    def run_until_signal(self, *, once: bool = False, drain_s: float = 60.0) -> bool:
        """The process of ``spectune worker``: work in a background thread while the main
        thread waits for SIGTERM or SIGINT, then drain (``stop``). Why not unwind with an
        exception in the main thread: the trial must be put back and the job requeued,
        which a stop does and an interrupt cannot. True when a signal stopped it."""
        got = threading.Event()
        sigs = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, lambda *_: got.set()) for sig in sigs}
        try:
            self.start(once=once)
            while self.alive and not got.wait(0.2):
                pass
            if got.is_set():
                log.info("worker %s: stopping (signal)", self.worker_id)
                self.stop(timeout_s=drain_s)
            return got.is_set()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the engine in flight, put its trial back for a retry and its job (if this
        worker owns it) back in the queue."""
        self._stop.set()
        with self._lock:
            control = self._control
        if control is not None:
            control.cancel()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)


class WorkerSettings(Protocol):
    """The service settings a worker is built from (``tuner.api.ServiceSettings``; named
    here by shape, as the API package imports this module)."""

    @property
    def work_dir(self) -> Path: ...
    @property
    def worker_poll_s(self) -> float: ...
    @property
    def worker_heartbeat_s(self) -> float: ...
    @property
    def worker_stale_after_s(self) -> float: ...


def worker_from_settings(
    store: Store,
    settings: WorkerSettings,
    *,
    devices: str | None = None,
    measurers: MeasurerFactory | None = None,
) -> Worker:
    """The worker ``spectune worker`` runs and ``spectune serve`` embeds, from the service
    settings. ``store`` keeps its own (long) reconnect retry: a job rides out a restart."""
    return Worker(
        store,
        work_dir=settings.work_dir,
        poll_s=settings.worker_poll_s,
        heartbeat_s=settings.worker_heartbeat_s,
        stale_after_s=settings.worker_stale_after_s,
        devices=devices,
        measurers=measurers,
    )
