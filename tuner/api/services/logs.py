"""The running trial's engine log, live: the tail of the log the job's engine writes now.

Only a file in the job's own log folder (``<work_dir>/logs/<database>-<hash>-job-N/``, as
``tuner.job.log_folder`` names it) is ever read, whatever a trial row says; the text is
scrubbed (``tuner.api._scrub``: bearer tokens, ``Authorization:`` values, API keys, the
service's configured key values) before it is answered.
"""

from __future__ import annotations

from pathlib import Path

from tuner.api._scrub import scrub_for
from tuner.api.schemas import LogTail
from tuner.api.settings import ServiceSettings
from tuner.job import log_folder
from tuner.states import JobState, TrialState
from tuner.storage import Store

__all__ = ["log_dir", "running_log"]


def log_dir(store: Store, job_id: int, work_dir: Path) -> Path:
    """The job's own log folder (as ``tuner.job.run_job`` names it)."""
    return (work_dir / "logs" / log_folder(store.url, job_id)).resolve()


def _confined(folder: Path, name: str) -> Path | None:
    p = (folder / name).resolve()
    return p if p.is_relative_to(folder) and p.is_file() else None


def _newest(folder: Path) -> Path | None:
    """The log written last (the end-of-job confirmation runs no trial row)."""
    if not folder.is_dir():
        return None
    logs = [p for p in folder.glob("*.log") if _confined(folder, p.name) is not None]
    return max(logs, key=lambda p: p.stat().st_mtime, default=None)


def _tail(path: Path, max_bytes: int) -> tuple[str, bool]:
    with path.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        data = f.read()
    truncated = size > max_bytes
    text = data.decode(errors="replace")
    if truncated and "\n" in text:
        text = text.split("\n", 1)[1]  # drop the partial first line
    return text, truncated


def running_log(store: Store, settings: ServiceSettings, job_id: int, max_bytes: int) -> LogTail:
    job = store.job(job_id, with_trials=True)
    base = LogTail(job_id=job_id, job_state=job.state, running=False)
    if job.state != JobState.RUNNING:
        return base
    folder = log_dir(store, job_id, settings.work_dir)
    running = sorted(t.number for t in job.trials if t.state == TrialState.RUNNING)
    number = running[-1] if running else None
    path = _confined(folder, f"trial-{number}.log") if number is not None else _newest(folder)
    if path is None:
        return base.model_copy(update={"running": True, "trial_number": number})
    text, truncated = _tail(path, max_bytes)
    return LogTail(
        job_id=job_id,
        job_state=job.state,
        running=True,
        trial_number=number,
        file=path.name,
        text=scrub_for(settings, text) or "",
        truncated=truncated,
    )
