"""Trials: each one from the store's one read model (``TrialRecord``), paged or in detail.

Engine log text (``fail_detail``, ``log_tail``) is scrubbed of secrets before it is served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.api._scrub import scrub_for
from tuner.api.schemas import TrialDetail, TrialPage, TrialPublic
from tuner.api.settings import ServiceSettings
from tuner.storage import LOG_TAIL_CHARS, Store, TrialNotFound, TrialRecord

__all__ = ["trial_detail", "trials_page"]

# A record's fields (computed ones too: prediction_error_pct) that answer a trial field of the
# same name (the rest: metrics, log path).
_RECORD_FIELDS = {*TrialRecord.model_fields, *TrialRecord.model_computed_fields}
_SHARED = tuple(n for n in TrialPublic.model_fields if n in _RECORD_FIELDS and n != "metrics")


def _metrics(rec: TrialRecord) -> dict[str, Any]:
    """The objective point's metrics, named by the job's first workload (its concurrency is
    the trial's ``concurrency``)."""
    rest = {k: v for k, v in rec.metrics.items() if k not in ("workload", "concurrency")}
    return {"workload": rec.workload, **rest}


def _public(rec: TrialRecord, settings: ServiceSettings) -> dict[str, Any]:
    out = {n: getattr(rec, n) for n in _SHARED}
    out["fail_detail"] = scrub_for(settings, out.get("fail_detail"))
    return {**out, "metrics": _metrics(rec)}


def trials_page(
    store: Store, settings: ServiceSettings, job_id: int, offset: int, limit: int
) -> TrialPage:
    recs = store.trial_records(job_id)
    items = [TrialPublic(**_public(r, settings)) for r in recs[offset : offset + limit]]
    return TrialPage(items=items, total=len(recs), offset=offset, limit=limit)


def _log_tail(path: str | None, work_dir: Path) -> str | None:
    """Only logs under the service's own work folder are read (never an arbitrary path)."""
    if not path:
        return None
    p = Path(path).resolve()
    if not p.is_relative_to(work_dir.resolve()) or not p.is_file():
        return None
    with p.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - LOG_TAIL_CHARS))
        return f.read().decode(errors="replace")


def trial_detail(store: Store, settings: ServiceSettings, job_id: int, number: int) -> TrialDetail:
    rec = next((r for r in store.trial_records(job_id) if r.number == number), None)
    if rec is None:
        raise TrialNotFound(f"job {job_id} has no trial {number}")
    tail = scrub_for(settings, _log_tail(rec.log_path, settings.work_dir))
    return TrialDetail(**_public(rec, settings), log_tail=tail)
