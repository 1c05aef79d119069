"""Watches: deployed servers the service scrapes against the job that chose their
configuration (migration v0.8.0.a), each with the latest window's answer.

Why stored: the API registers them, a poller in any API process reads them, and the UI and
``/metrics`` show the latest verdict without scraping anything themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from tuner.errors import NotFound
from tuner.storage._models import Base, JobModel, utcnow
from tuner.storage._queue import JobNotFound
from tuner.storage._retry import retry_db

__all__ = ["WatchInfo", "WatchModel", "WatchNotFound", "WatchQueries"]


class WatchModel(Base):
    """One watched server: its URL, the job whose winner it should run, the window length
    and the latest window's answer (``last_result``: the watch's JSON document)."""

    __tablename__ = "spectune_watches"

    watch_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("spectune_jobs.job_id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(Text)
    interval_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    checked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(60), nullable=True)
    last_result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)


class WatchNotFound(NotFound):
    """No watch with that id."""


@dataclass(frozen=True)
class WatchInfo:
    """A watch as read (detached from its session)."""

    id: int
    job_id: int
    url: str
    interval_s: float
    created_at: datetime
    checked_at: datetime | None
    verdict: str | None
    last_result: dict[str, Any] | None
    last_error: str | None


def _info(r: WatchModel) -> WatchInfo:
    return WatchInfo(
        r.watch_id,
        r.job_id,
        r.url,
        r.interval_s,
        r.created_at,
        r.checked_at,
        r.verdict,
        r.last_result,
        r.last_error,
    )


class WatchQueries:
    """Mixin of ``Store`` (which supplies ``session()``); one short transaction each."""

    session: Callable[[], AbstractContextManager[Session]]

    @retry_db
    def create_watch(self, job_id: int, url: str, interval_s: float) -> WatchInfo:
        """JobNotFound for an unknown job."""
        with self.session() as s:
            if s.get(JobModel, job_id) is None:
                raise JobNotFound(f"job {job_id} not found")
            row = WatchModel(job_id=job_id, url=url, interval_s=interval_s, created_at=utcnow())
            s.add(row)
            s.flush()
            return _info(row)

    @retry_db
    def watches(self, job_id: int | None = None) -> list[WatchInfo]:
        with self.session() as s:
            q = select(WatchModel).order_by(WatchModel.watch_id)
            if job_id is not None:
                q = q.where(WatchModel.job_id == job_id)
            return [_info(r) for r in s.scalars(q)]

    @retry_db
    def watch(self, watch_id: int) -> WatchInfo:
        with self.session() as s:
            row = s.get(WatchModel, watch_id)
            if row is None:
                raise WatchNotFound(f"watch {watch_id} not found")
            return _info(row)

    @retry_db
    def delete_watch(self, watch_id: int) -> None:
        with self.session() as s:
            row = s.get(WatchModel, watch_id)
            if row is None:
                raise WatchNotFound(f"watch {watch_id} not found")
            s.delete(row)

    @retry_db
    def record_watch(
        self,
        watch_id: int,
        *,
        verdict: str | None,
        result: dict[str, Any] | None,
        error: str | None,
    ) -> bool:
        """The latest window's answer (or why there is none); False when the watch was
        deleted meanwhile."""
        with self.session() as s:
            row = s.get(WatchModel, watch_id)
            if row is None:
                return False
            row.checked_at = utcnow()
            row.verdict = verdict
            if result is not None:
                row.last_result = result
            row.last_error = error
            return True
