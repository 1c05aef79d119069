"""One job as the code that runs it sees it: a frozen context made once per ``run_job``.

Before it, ``(store, job_id)``, the space, the budget, the log folder, the cancel switch, the
worker's identity and two progress callbacks were threaded through dozens of signatures; the
search, the trial runner, the measurer factory and the integrations now take this one object.
Frozen: nothing below the job may change which job it is working for.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from tuner.measure import JobControl, Measurer
from tuner.space import SearchSpace
from tuner.storage import Store
from tuner.workloads import Prompt

__all__ = [
    "JobContext",
    "JobHooks",
    "MeasurerFactory",
    "TrialEvent",
    "WorkerContext",
    "log_folder",
]


def log_folder(url: str, job_id: int) -> str:
    """Job ids restart in every database: the folder names the database too, so two
    databases sharing a work folder never overwrite each other's engine logs."""
    try:
        u = make_url(url)
        name = Path(u.database).stem if u.get_backend_name() == "sqlite" and u.database else ""
    except Exception:
        name = ""
    tag = hashlib.sha256(url.encode()).hexdigest()[:6]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40]
    return f"{safe}-{tag}-job-{job_id}" if safe else f"{tag}-job-{job_id}"


@dataclass(frozen=True)
class TrialEvent:
    """What a progress display needs after each trial."""

    number: int
    n_trials: int
    state: str
    method: str
    params: dict[str, Any]
    seconds: float
    summary: str


@dataclass(frozen=True)
class JobHooks:
    """What a progress display (the CLI) is told: a trial starts, a trial ended. Typed, so a
    misspelt hook is an error where it is made, not a silent no-op."""

    on_trial: Callable[[TrialEvent], None] | None = None
    on_start: Callable[[int, dict[str, Any]], None] | None = None

    def started(self, number: int, params: dict[str, Any]) -> None:
        if self.on_start is not None:
            self.on_start(number, params)

    def ended(self, event: TrialEvent) -> None:
        if self.on_trial is not None:
            self.on_trial(event)


@dataclass(frozen=True)
class WorkerContext:
    """The worker running a job's trials, one of possibly several sharing the job (Optuna's
    distributed mode: each process asks the same study in the same database).

    ``heartbeat_s``/``grace_s``: each running trial beats; one silent for ``grace_s`` is
    failed by any worker and retried once. ``stopping``: true when the worker was asked to
    stop (its trial in flight is then put back, not cancelled)."""

    worker_id: str | None = None
    devices: str | None = None
    heartbeat_s: float = 5.0
    grace_s: float = 60.0
    poll_s: float = 2.0
    stopping: Callable[[], bool] = field(default=lambda: False)


@dataclass(frozen=True)
class JobContext:
    """One job being run by one worker. ``owner`` is false for a helper that joined a job
    another worker owns: it runs trials, never seeds, confirms or ends the job."""

    store: Store
    job_id: int
    space: SearchSpace
    n_trials: int
    work_dir: Path
    control: JobControl
    worker: WorkerContext = field(default_factory=WorkerContext)
    hooks: JobHooks = field(default_factory=JobHooks)
    owner: bool = True

    @classmethod
    def reading(cls, store: Store, job_id: int, work_dir: Path = Path(".spectune")) -> JobContext:
        """A stored job as a reader sees it (the API's predictions, a report): nothing runs
        under this context and nothing cancels it. Raises the store's ``JobNotFound``, and
        ``SpaceError`` for a stored space today's rules refuse."""
        job = store.job(job_id)
        return cls(store, job_id, store.space(job_id), job.n_trials, work_dir, JobControl())

    @property
    def log_dir(self) -> Path:
        """Where this job's engine logs go (``log_folder``)."""
        return self.work_dir / "logs" / log_folder(self.store.url, self.job_id)

    def count_launch(self, startup_s: float, confirm: bool) -> None:
        """A measurer's ``OnLaunch``: every launch (and its start-up time) counts on the job,
        the search's and the confirmation's apart."""
        self.store.count_launch(self.job_id, startup_s, confirm=confirm)


# Chosen once per job (``tuner.job.default_measurer``: a recorded surface or real engines).
# Tests inject one that launches the FAKE OpenAI server instead of vLLM; the product has no
# setting or variable that could.
MeasurerFactory = Callable[[JobContext, dict[str, list[Prompt]]], Measurer]
