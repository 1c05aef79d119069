"""A job's stored search space read back under today's rules (a mixin of ``Store``, which
supplies ``session()`` and ``job()``).

Why two readings: a job stored by an older version may hold values today's schema refuses
(a seed of -1, a flag no longer on the allow-list, a depth over 64, a free-form dtype).
Running it would launch what today's rules forbid, so running reads it strictly and such a
job ends ``failed`` with the reason (when claimed, cancelled, or on ``spectune db upgrade``).
Its measured trials are still worth reading, so reading drops each refused field (the
schema's default stands in) and parses again; what cannot be read even so is a
``SpaceRefused`` (a ``Conflict``: HTTP 409), never a crash.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tuner.errors import Conflict
from tuner.space import SearchSpace, SpaceError, parse_space
from tuner.states import JobState
from tuner.storage._models import JobModel, utcnow
from tuner.storage._retry import no_retry, retry_db

__all__ = ["REFUSED", "SpaceRefused", "StoredSpaceQueries", "space_of_job", "space_refusal"]

# The start of the error a job ends with when its stored space no longer validates.
REFUSED = "stored search space no longer valid"
# Reading drops refused fields this many times at most (each pass may uncover a field that
# depended on a dropped one, e.g. a range left without its required ``max``).
_PASSES = 8
_DROP = object()
_LIVE = (JobState.QUEUED, JobState.RUNNING)
Loc = tuple[str | int, ...]


class SpaceRefused(Conflict, SpaceError):
    """A stored job's search space that today's rules refuse: a ``Conflict`` (HTTP 409, the
    CLI's input exit code) and a ``SpaceError`` (``errors`` names each field and why).
    ``reason`` is the error the job ends with (``REFUSED: field: why; …``)."""

    def __init__(self, job_id: int, reason: str, errors: Sequence[tuple[Loc, str]]) -> None:
        super().__init__(f"job {job_id}: {reason}", errors)
        self.job_id, self.reason = job_id, reason


def _reason(e: SpaceError) -> str:
    """The refusal in one line: ``seed: …; engine.dtype: …``."""
    if not e.errors:
        return str(e).replace("\n", " ")
    return "; ".join(f"{'.'.join(map(str, loc)) or '(top level)'}: {msg}" for loc, msg in e.errors)


def _stored(job: JobModel) -> tuple[Any, Path, str]:
    """The stored space as the schema reads it, the folder its paths resolve against, and
    how messages name it (a row that is not a mapping is left for ``parse_space`` to refuse)."""
    data, base = job.space, Path(".")
    if isinstance(data, dict):
        data = dict(data)
        base = Path(str(data.pop("base_dir", ".")))
        data.pop("hardware", None)
    return data, base, f"(job {job.job_id})"


def _strict(job: JobModel) -> SearchSpace:
    data, base, source = _stored(job)
    try:
        return parse_space(data, base_dir=base, source=source)
    except SpaceError as e:
        raise SpaceRefused(job.job_id, f"{REFUSED}: {_reason(e)}", e.errors) from None


def _mark(data: Any, loc: Loc) -> bool:
    """Mark the value at ``loc`` for dropping, or (a required field is missing there) the
    nearest value above it; False when only the whole space could go."""
    parents: list[tuple[Any, str | int]] = []
    node = data
    for key in loc:
        if isinstance(node, dict) and key in node:
            parents.append((node, key))
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            parents.append((node, key))
            node = node[key]
        else:
            break
    if not parents:
        return False
    parent, key = parents[-1]
    parent[key] = _DROP
    return True


def _purge(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _purge(v) for k, v in node.items() if v is not _DROP}
    if isinstance(node, list):
        return [_purge(v) for v in node if v is not _DROP]
    return node


def _lenient(job: JobModel) -> SearchSpace:
    data, base, source = _stored(job)
    data = copy.deepcopy(data)
    first: SpaceError | None = None
    for _ in range(_PASSES):
        try:
            return parse_space(data, base_dir=base, source=source)
        except SpaceError as e:
            first = first or e
            marked = [_mark(data, tuple(loc)) for loc, _msg in e.errors]
            if not any(marked):
                break
            data = _purge(data)
    assert first is not None
    why = f"{REFUSED}, not even with today's defaults for its refused fields: {_reason(first)}"
    raise SpaceRefused(job.job_id, why, first.errors)


def space_of_job(job: JobModel, *, for_reading: bool = False) -> SearchSpace:
    """The search space a job was stored with (paths resolve against its folder).

    Strict by default (what a job runs with): ``SpaceRefused`` when today's rules refuse it.
    ``for_reading`` (its trials, report, front): each refused field reads as the schema's
    default instead; ``SpaceRefused`` only when even that cannot make it valid."""
    try:
        return _strict(job)
    except SpaceRefused:
        if not for_reading:
            raise
    return _lenient(job)


def space_refusal(job: JobModel) -> str | None:
    """Why today's rules refuse the job's stored space (``REFUSED: field: reason; …``), or
    None when it is valid."""
    try:
        _strict(job)
    except SpaceRefused as e:
        return e.reason
    return None


class StoredSpaceQueries:
    """Mixin of ``Store``: ends the queued or running jobs no worker of today can run."""

    session: Callable[[], AbstractContextManager[Session]]
    job: Callable[..., JobModel]

    @retry_db
    def _live_jobs(self) -> list[JobModel]:
        with self.session() as s:
            return list(s.scalars(select(JobModel).where(JobModel.state.in_(_LIVE))).all())

    @retry_db
    def space_refusal(self, job_id: int) -> str | None:
        """``space_refusal`` of the stored job; JobNotFound if none."""
        return space_refusal(self.job(job_id))

    @retry_db
    def end_refused(self, job_id: int, error: str, *, state: str = JobState.FAILED) -> bool:
        """End a queued or running job whose space today's rules refuse (a compare-and-set).
        The cancel flag is set too, so a worker of an older version still running it stops.
        False when it had already ended."""
        with self.session() as s:
            res = s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id, JobModel.state.in_(_LIVE))
                .values(state=state, error=error, finished_at=utcnow(), cancel_requested=True)
                .execution_options(synchronize_session=False)
            )
            return res.rowcount == 1

    @no_retry  # each of its steps retries (a compare-and-set: safe to repeat)
    def fail_refused_jobs(self) -> list[tuple[int, str]]:
        """Check every queued or running job's stored space against today's rules (``spectune
        db upgrade``) and fail those it refuses, with the reason; their trials stay.
        Returns (job id, error) for each job failed."""
        out = []
        for job in self._live_jobs():
            why = space_refusal(job)
            if why is not None and self.end_refused(job.job_id, why):
                out.append((job.job_id, why))
        return out
