"""The guide's launches in the other batch classes: the baseline and the incumbent there.

Why: a ``max_num_seqs`` below a concurrency level makes the engine queue requests there; the
running batch, min(concurrency, max_num_seqs), is what a step costs and what speculation's
benefit depends on, and the queue wait adds to TTFT -- the trade-off a TTFT SLO decides. The
guide searches proposers and depths in the objective class (``Layout.place``); once nothing
is left there, each other class gets two launches: the same target without speculation
(every verdict at that batch is against it, never against another batch's baseline) and the
incumbent's configuration (what the winner does when requests queue). One launch each: a
class member already launched (any memory share) counts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tuner.pareto import feasible, lossless_rules
from tuner.search._layout import MEASURED, Layout, Proposal, primary
from tuner.space import SearchSpace, batch_class, batch_classes, running_batch
from tuner.storage import TrialState

__all__ = ["class_launch", "queue_text"]


def _class_key(params: dict[str, Any], levels: Sequence[int]) -> str:
    """A configuration up to its class: memory share left out, batch size as its class."""
    d = {k: v for k, v in params.items() if k not in ("memory_fraction", "max_num_seqs")}
    d["batch"] = list(batch_class(int(params["max_num_seqs"]), levels))
    return json.dumps(d, sort_keys=True)


def queue_text(seqs: int, levels: Sequence[int]) -> str:
    """``a running batch of 2 at concurrency 4 -- requests queue`` for every level where
    ``seqs`` is below the offered concurrency."""
    parts = [f"a running batch of {seqs} at concurrency {c}" for c in levels if seqs < c]
    return (", ".join(parts) + " -- requests queue") if parts else "no level queues"


def _incumbent(space: SearchSpace, launched: Sequence[Any], lay: Layout) -> Any | None:
    """The objective class's best feasible speculative launch at the objective level."""
    level = (space.primary_workload, space.primary_concurrency)
    metric = space.objectives[0].metric
    sign = 1.0 if space.objectives[0].resolved_direction == "maximize" else -1.0
    limits, rules = space.slo.limits(), lossless_rules(space)
    best: tuple[float, Any] | None = None
    for r in launched:
        m = primary(r, level)
        if r.params.get("method") == "none" or r.state != TrialState.COMPLETE:
            continue
        if m is None or m.get(metric) is None or not lay.same_batch(r.params):
            continue
        ok, _ = feasible(
            m,
            limits,
            lossless_match_rate=r.lossless_match_rate,
            lossless_p_value=r.lossless_p_value,
            **rules,
        )
        if ok and (best is None or sign * float(m[metric]) > best[0]):
            best = (sign * float(m[metric]), r)
    return None if best is None else best[1]


def class_launch(space: SearchSpace, rows: Sequence[Any], lay: Layout) -> Proposal | None:
    """The next launch in another batch class (the baseline there first, then the
    incumbent's configuration), or None when every class has both or there is no other."""
    levels = space.concurrency
    objective = batch_class(lay.max_num_seqs, levels)
    others = [m[0] for m in batch_classes(space.max_num_seqs, levels)]
    others = [s for s in others if batch_class(s, levels) != objective]
    if not others:
        return None
    launched = [r for r in rows if r.reused_from is None and r.state in MEASURED]
    winner = _incumbent(space, launched, lay)
    target = winner.params.get("target") if winner is not None else None
    base = next(
        (
            r
            for r in sorted(launched, key=lambda r: r.number)
            if r.params.get("method") == "none"
            and r.params.get("target") == target
            and lay.same_batch(r.params)
        ),
        None,
    )
    taken = {_class_key(r.params, levels) for r in rows if r.params.get("max_num_seqs")}
    c = lay.concurrency
    # The class nearest the objective's running batch first: the likeliest to be worth it.
    for s in sorted(others, key=lambda s: (-running_batch(s, c), s)):
        queue = queue_text(s, levels)
        for src, what in (
            (
                base,
                "the baseline: every speculative configuration at this batch is compared "
                "with the same target without speculation at the same batch",
            ),
            (
                winner,
                "the incumbent's configuration (trial {n}): what the best one does at this batch",
            ),
        ):
            if src is None:
                continue
            cand = {**src.params, "max_num_seqs": s}
            if _class_key(cand, levels) in taken:
                continue
            why = f"max_num_seqs {s}: {queue}; {what.format(n=src.number)}"
            return Proposal(cand, "guide: batch", why)
    return None
