"""The report's offline-pricing section: every proposer the job priced on the baseline's
outputs, greedy or sampled (launched or not: the prices are kept with the job), each
launched one's acceptance as priced before its launch beside what the engine's counters then
measured, with the error; the proposers the guide did not launch, and why.

Why apart from the depth model's section: these predict acceptance (a count), not speed,
and are checked position by position; a prediction never reads as a measurement.
"""

from __future__ import annotations

import json
from typing import Any

from tuner.cli._render import table
from tuner.methods import params_text
from tuner.metrics import acceptance_rate_se
from tuner.search import family_key
from tuner.storage import TrialRecord

__all__ = ["offline_text"]


def _rate(v: float | None, se: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if se is None else f"{v:.3f} ± {se:.3f}"


def _cells(xs: list[float] | None) -> str:
    return "-" if not xs else " ".join(f"{x:.3f}" for x in xs)


def priced_text(recs: list[TrialRecord], prices: dict[str, Any] | None) -> str:
    """Every proposer priced, at its deepest priced depth, and which trials launched it;
    then the unpriced ones with the reason. Empty without stored prices."""
    if not prices or not (prices.get("by_proposer") or prices.get("unpriced")):
        return ""
    launched: dict[str, list[str]] = {}
    for r in recs:
        if r.params.get("method") not in (None, "none") and r.reused_from is None:
            launched.setdefault(family_key(r.params), []).append(str(r.number))
    rows = []
    for fk, depths in (prices.get("by_proposer") or {}).items():
        if not depths:
            continue
        k = max(int(d) for d in depths)
        pp = [float(x) for x in depths[str(k)]["per_position_acceptance"]]
        trials = launched.get(fk)
        rows.append(
            [
                params_text({**json.loads(fk), "num_speculative_tokens": k}),
                _cells(pp),
                f"{1 + sum(pp):.2f}",
                f"trials {', '.join(trials)}" if trials else "not launched",
            ]
        )
    out = [
        f"Offline prices (every proposer, priced on {prices.get('basis') or 'the baseline'}"
        f" in {float(prices.get('seconds') or 0):.0f} s; predictions, not measurements):"
    ]
    if rows:
        out.append(table(rows, ["proposer", "acceptance by position", "tau", "launched"]))
    for fk, why in (prices.get("unpriced") or {}).items():
        name = " ".join(f"{k}={v}" for k, v in json.loads(fk).items())
        out.append(f"unpriced: {name}: {why}")
    return "\n".join(out)


def offline_text(recs: list[TrialRecord], prices: dict[str, Any] | None = None) -> str:
    """Empty for a job that priced nothing offline."""
    head = priced_text(recs, prices)
    body = _launched_text(recs)
    return "\n\n".join(t for t in (head, body) if t)


def _launched_text(recs: list[TrialRecord]) -> str:
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
        rate = r.metrics.get("acceptance_rate")
        rows.append(
            [
                str(r.number),
                params_text(r.params),
                _cells(off),
                _cells(got) if got else f"({r.state})",
                "-" if err is None else f"{err:.3f}",
                _rate(r.offline_acceptance_rate, r.offline_acceptance_rate_se),
                _rate(
                    rate,
                    acceptance_rate_se(
                        got, r.metrics.get("num_drafts"), r.metrics.get("num_draft_tokens")
                    ),
                ),
            ]
        )
    if not rows and not unpriced and not skipped:
        return ""
    out = []
    if rows:
        out.append(
            "Offline acceptance (per position, priced on the baseline's outputs before each "
            "launch; a prediction) against the engine's counters:"
        )
        headers = ["trial", "configuration", "offline", "measured", "max |error|"]
        out.append(table(rows, [*headers, "rate offline", "rate measured"]))
        if any("±" in row[-1] for row in rows):
            out.append(
                "± a standard error: a sampled price's over the baseline's draws; a measured "
                "rate's from its own counters, rounds taken as independent (a lower bound)"
            )
        if errs:
            out.append(f"largest error {max(errs):.3f} over {len(errs)} launched proposers")
    for why, numbers in unpriced.items():
        out.append(f"trials {', '.join(numbers)}: {why}")
    for number, why in dict.fromkeys(skipped):  # members of one class read the same: once
        out.append(f"not launched (decided before trial {number}): {why}")
    return "\n".join(out)
