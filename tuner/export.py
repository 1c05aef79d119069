"""Export the winning configuration in the forms engines take."""

from __future__ import annotations

from typing import Any

from tuner.engines import EXPORT_FORMATS, EngineConfig, ExportUnsupported, render_export
from tuner.pareto import Point, Report, job_report
from tuner.storage import Store
from tuner.verdict import DOES_NOT_PAY

__all__ = [
    "FORMATS",
    "ExportError",
    "depth_schedule",
    "export_job",
    "export_point",
    "winner_exports",
]

FORMATS = tuple(f.name for f in EXPORT_FORMATS)  # the one list, from tuner.engines


_FAMILY_KEYS = (
    "draft",
    "head",
    "target",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "max_num_seqs",
    "memory_fraction",
)


def depth_schedule(rep: Report) -> list[list[int]] | None:
    """vLLM's ``num_speculative_tokens_per_batch_size`` from the measurements: at each
    measured concurrency, the depth (among trials that differ from the winner only in depth)
    with the lowest time per output token, 0 only where that depth's verdict is "does not
    pay" (slower than the baseline beyond the between-launch spread: a "tied" verdict is
    what noise alone can give, and never switches speculation off); each level's
    depth holds from that level up to the next one. None when one depth is best everywhere
    (or the winner is the baseline)."""
    w = rep.winner
    if w is None or w.method == "none":
        return None
    family = {
        p.trial_number: int(p.params["num_speculative_tokens"])
        for p in rep.points
        if p.method == w.method and all(p.params.get(k) == w.params.get(k) for k in _FAMILY_KEYS)
    }
    levels = sorted(rep.baseline_by_conc)
    best: list[int] = []
    for c in levels:
        cands = [
            (v.spec_ms_per_token, k, v)
            for n, k in family.items()
            for v in rep.verdicts.get(n, [])
            if v.concurrency == c
        ]
        if not cands:
            return None
        _, k, v = min(cands, key=lambda x: (x[0], x[1]))
        best.append(0 if v.state == DOES_NOT_PAY else k)
    if len(set(best)) <= 1 or max(best) == 0:
        return None
    top = int(w.params.get("max_num_seqs") or levels[-1])
    out = []
    for i, (c, k) in enumerate(zip(levels, best, strict=True)):
        start = 1 if i == 0 else c
        end = levels[i + 1] - 1 if i + 1 < len(levels) else max(top, c)
        out.append([start, end, k])
    return out


class ExportError(LookupError):
    pass


def export_point(p: Point, fmt: str, rep: Report | None = None) -> str:
    """The winner ``p`` in format ``fmt``; the schedule format reads the report's levels."""
    if fmt not in FORMATS:
        raise ExportError(f"format: unknown {fmt!r}; choose from {', '.join(FORMATS)}")
    cfg = EngineConfig.from_dict(p.engine_config)
    schedule = depth_schedule(rep) if rep is not None and fmt == "vllm-schedule-json" else None
    try:
        return render_export(fmt, cfg, schedule)
    except ExportUnsupported as e:
        raise ExportError(str(e)) from None


def export_job(store: Store, job_id: int, fmt: str, **report_kw: Any) -> str:
    """The job's winner in ``fmt``; ExportError when there is none to give, the store's
    ``SpaceRefused`` when today's rules refuse the job's stored space (its front is read with
    defaults for the refused fields, so an export would not be what was measured)."""
    if fmt not in FORMATS:
        raise ExportError(f"format: unknown {fmt!r}; choose from {', '.join(FORMATS)}")
    store.space(job_id)  # strict
    rep = job_report(store, job_id, **report_kw)
    if rep.replay_surface is not None:
        raise ExportError(
            f"job {job_id} replayed the recorded surface {rep.replay_surface} to benchmark the "
            "search; nothing was measured in it. Export from the job that recorded the surface."
        )
    if rep.winner is None:
        raise ExportError(
            f"job {job_id} has no feasible configuration at concurrency {rep.concurrency} "
            f"on workload {rep.workload} under SLO {rep.slo or 'none'}"
        )
    return export_point(rep.winner, fmt, rep)


def winner_exports(rep: Report) -> dict[str, str | None]:
    """For each format, why the report's winner has no form in it (None: it has one), so a
    page can show the reason without asking for an export that must fail."""
    out: dict[str, str | None] = {}
    for name in FORMATS:
        if rep.replay_surface is not None:
            out[name] = "a replayed surface: nothing was measured in this job"
        elif rep.winner is None:
            out[name] = "nothing feasible under this SLO: nothing to export"
        else:
            try:
                export_point(rep.winner, name, rep)
                out[name] = None
            except ExportError as e:
                out[name] = str(e)
    return out
