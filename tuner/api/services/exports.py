"""Exports: the list of formats (tuner.engines.EXPORT_FORMATS) and the winner in one of them."""

from __future__ import annotations

from tuner.api.schemas import ExportFormat, ExportFormatList, ExportFormatPublic, ExportPublic
from tuner.engines import EXPORT_FORMATS
from tuner.errors import Conflict
from tuner.export import ExportError, export_point
from tuner.report import ReportQuery, report, resolve_query
from tuner.storage import Store

__all__ = ["export_formats", "export_winner"]


def export_formats() -> ExportFormatList:
    return ExportFormatList(
        formats=[
            ExportFormatPublic(
                name=f.name, label=f.label, engine=f.engine, description=f.description
            )
            for f in EXPORT_FORMATS
        ]
    )


def export_winner(store: Store, job_id: int, fmt: ExportFormat, q: ReportQuery) -> ExportPublic:
    """Conflict when nothing was measured (a replayed surface), nothing is feasible, or the
    engine has no form for the winner, or its stored space today's rules refuse (what it
    would export is not what was measured)."""
    space = store.space(job_id)  # strict: SpaceRefused, a Conflict naming each field
    sl = resolve_query(space, q)
    rep = report(store, job_id, q, sl, sl.concurrency)
    if rep.replay_surface is not None:
        raise Conflict(
            f"job {job_id} replayed the recorded surface {space.engine.surface} to benchmark the "
            "search; nothing was measured in it: nothing to export"
        )
    if rep.winner is None:
        raise Conflict(
            f"job {job_id} has no feasible configuration at concurrency {sl.concurrency} on "
            f"workload {sl.workload} under SLO {sl.slo or 'none'}: nothing to export"
        )
    try:
        text = export_point(rep.winner, fmt, rep)
    except ExportError as e:
        raise Conflict(str(e)) from None
    return ExportPublic(
        format=fmt,
        text=text,
        trial_number=rep.winner.trial_number,
        concurrency=sl.concurrency,
        slo=sl.slo,
    )
