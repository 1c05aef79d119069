"""The report's per-level TTFT and end-to-end table, printed where they decide.

Why: when the SLO limits p99 TTFT or p99 end-to-end, or requests queued in the engine
(``max_num_seqs`` below the concurrency: the running batch is min(concurrency,
max_num_seqs) and the rest wait, their wait added to TTFT), the time per token the verdicts
read does not show what decides feasibility. This table shows it at every level, beside the
mean queue wait the engine reported, for every batch class's baseline and every speculative
trial.
"""

from __future__ import annotations

from typing import Any

from tuner.cli._common import fmt, table
from tuner.methods import params_text
from tuner.pareto import Report
from tuner.space import running_batch

__all__ = ["latency_text"]


def _cell(m: dict[str, Any] | None, name: str, slo: dict[str, float]) -> str:
    """One value, marked ``>SLO`` when it breaks the report's limit on it."""
    v = (m or {}).get(name)
    if v is None:
        return "-"
    over = name in slo and float(v) > slo[name]
    return fmt(float(v), ".1f") + (" >SLO" if over else "")


def latency_text(rep: Report) -> str:
    """p99 TTFT and p99 end-to-end (and the mean queue wait, when the engine reported one)
    per level, of each baseline and each speculative trial of the report."""
    levels = sorted({c for per in rep.measured.values() for c in per})
    queue = any(
        m.get("mean_queue_ms") is not None for per in rep.measured.values() for m in per.values()
    )
    header = ["trial", "configuration", "max_num_seqs"]
    for c in levels:
        header += [f"c={c} p99 TTFT ms", f"c={c} p99 E2E ms"]
        header += [f"c={c} queue ms"] if queue else []
    names = {p.trial_number: p for p in (*rep.points, *rep.pruned)}
    rows = []
    for number in [*rep.baselines.all, *sorted(rep.verdicts)]:
        per = rep.measured.get(number, {})
        p = names.get(number)
        seqs = rep.baselines.seqs.get(number)
        if p is None:
            label = f"trial {number}"
        elif p.method == "none":
            label = "baseline (no speculation)"
        else:
            label = params_text(p.params)
        base = rep.baselines.for_trial(number) if p is None or p.method != "none" else None
        if base is not None and base != number:
            label += f" (against trial {base})"
        row = [str(number), label, fmt(seqs)]
        for c in levels:
            m = per.get(c)
            batch = f" (batch {running_batch(seqs, c)})" if seqs and m and seqs < c else ""
            row += [_cell(m, "p99_ttft_ms", rep.slo) + batch, _cell(m, "p99_e2e_ms", rep.slo)]
            row += [fmt((m or {}).get("mean_queue_ms"), ".1f")] if queue else []
        rows.append(row)
    limits = ", ".join(
        f"{k} {v:g}" for k, v in rep.slo.items() if k in ("p99_ttft_ms", "p99_e2e_ms")
    )
    return "\n".join(
        [
            f"TTFT and end-to-end per concurrency (workload {rep.workload}"
            + (f"; SLO {limits}" if limits else "")
            + ")",
            table(rows, header),
            "(batch N: max_num_seqs below the concurrency, so the engine ran N requests at once "
            "and queued the rest, their wait added to TTFT; queue ms: the mean wait the engine "
            "reported; >SLO: over the limit; each speculative trial is compared with the "
            "baseline of its own batch)",
        ]
    )
