"""The report's search section: how each trial was proposed, which proposals were launched
as another member of their class, and every prediction against what was then measured.

Why a section of its own: a prediction must never read as a measurement. Here it is always
labelled "predicted", shown beside the measured value with the error, and nowhere else.
"""

from __future__ import annotations

import statistics
from collections import Counter

from tuner.cli._render import fmt, table
from tuner.methods import params_text
from tuner.states import TrialState
from tuner.storage import TrialRecord, search_launch

__all__ = ["engine_build_text", "search_text"]


def search_text(recs: list[TrialRecord]) -> str:
    """Empty for a job without search notes (older jobs)."""
    noted = [r for r in recs if r.search]
    if not noted:
        return ""
    launches = sum(1 for r in recs if r.reused_from is None and r.state != TrialState.WAITING)
    by = Counter(str(r.search.get("by")) for r in noted if r.search)
    classed = [r for r in noted if r.search and r.search.get("class")]
    out = [
        f"Search: {len(recs)} trials, {launches} engine launches; proposed by "
        + ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
        + "."
    ]
    if classed:
        out.append(
            f"{len(classed)} proposal(s) were launched as their class's member (batch size or "
            "memory share that no measured level can tell apart), e.g. trial "
            f"{classed[0].number}: {'; '.join(classed[0].search['class']['why'])}"  # type: ignore[index]
        )
    rows, errs = [], []
    for r in noted:
        pred = r.search.get("predicted") if r.search else None
        if not pred:
            continue
        err = r.prediction_error_pct
        if err is not None:
            errs.append(abs(err))
        name = pred["objective"]
        rows.append(
            [
                str(r.number),
                params_text(r.params),
                f"{pred['value']:.4g} +/-{100 * pred['rel_sigma']:.0f}%",
                fmt(search_launch(r.metrics).get(name), ".4g")
                if err is not None
                else f"({r.state})",
                "-" if err is None else f"{err:+.1f}%",
            ]
        )
    if rows:
        metric = next(
            r.search["predicted"]["objective"] for r in noted if r.search.get("predicted")
        )  # type: ignore[union-attr,index]
        out.append(
            f"Predicted against measured {metric} (depth model, before each launch; "
            "a prediction is never stored as a measurement):"
        )
        out.append(table(rows, ["trial", "configuration", "predicted", "measured", "error"]))
        if errs:
            out.append(
                f"median |error| {statistics.median(errs):.1f}% over {len(errs)} predictions "
                f"(largest {max(errs):.1f}%)"
            )
    return "\n".join(out)


def engine_build_text(recs: list[TrialRecord]) -> str:
    """The engine-build notes pre-flight stored with the job's trials (a known defect of the
    installed engine and what SpecTune did about it), each once; empty when there are none."""
    notes = [
        n
        for r in recs
        for n in ((r.search or {}).get("preflight") or [])
        if isinstance(n, str) and n.startswith("engine build: ")
    ]
    return "\n".join(f"Engine {n.removeprefix('engine ')}" for n in dict.fromkeys(notes))
