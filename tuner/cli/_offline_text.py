"""The report's offline-pricing section: each launched proposer's acceptance as priced on
the baseline's greedy outputs before its launch, beside what the engine's counters then
measured, with the error; the proposers the guide did not launch, and why.

Why apart from the depth model's section: these predict acceptance (a count), not speed,
and are checked position by position; a prediction never reads as a measurement.
"""

from __future__ import annotations

from tuner.cli._render import table
from tuner.methods import params_text
from tuner.storage import TrialRecord

__all__ = ["offline_text"]


def _cells(xs: list[float] | None) -> str:
    return "-" if not xs else " ".join(f"{x:.3f}" for x in xs)


def offline_text(recs: list[TrialRecord]) -> str:
    """Empty for a job that priced nothing offline."""
    rows, errs, unpriced, skipped = [], [], {}, []
    for r in recs:
        note = (r.search or {}).get("offline") or {}
        skipped += [(r.number, s) for s in (r.search or {}).get("skipped") or []]
        if note.get("unpriced"):
            unpriced.setdefault(note["unpriced"], []).append(str(r.number))
        off = r.offline_per_position_acceptance
        if off is None:
            continue
        got = [float(x) for x in (r.metrics.get("per_position_acceptance") or [])]
        err = max((abs(o - m) for o, m in zip(off, got, strict=False)), default=None)
        if err is not None:
            errs.append(err)
        rows.append(
            [
                str(r.number),
                params_text(r.params),
                _cells(off),
                _cells(got) if got else f"({r.state})",
                "-" if err is None else f"{err:.3f}",
            ]
        )
    if not rows and not unpriced and not skipped:
        return ""
    out = []
    if rows:
        out.append(
            "Offline acceptance (per position, priced on the baseline's greedy outputs before "
            "each launch; a prediction) against the engine's counters:"
        )
        headers = ["trial", "configuration", "offline", "measured", "max |error|"]
        out.append(table(rows, headers))
        if errs:
            out.append(f"largest error {max(errs):.3f} over {len(errs)} launched proposers")
    for why, numbers in unpriced.items():
        out.append(f"trials {', '.join(numbers)}: {why}")
    for number, why in skipped:
        out.append(f"not launched (decided before trial {number}): {why}")
    return "\n".join(out)
