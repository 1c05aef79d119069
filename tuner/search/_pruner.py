"""Stopping a trial early: its objective point is clearly worse than one already measured.

Why not one of Optuna's pruners: they judge one intermediate value and do not support
multi-objective studies. This one, like them a small object asked once per trial, compares
the whole objective point, each objective at the favourable end of its 95% interval, with
every feasible trial measured on the same target.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from tuner.pareto import feasible, lossless_rules
from tuner.space import SearchSpace
from tuner.storage import TrialState

__all__ = [
    "DominancePruner",
    "ObjectivePoint",
    "dominated_by",
    "interval_text",
    "objective_points",
]


class ObjectivePoint(NamedTuple):
    """A launched, complete trial at the job's objective point (first workload, objective
    concurrency)."""

    number: int
    params: dict[str, Any]
    metrics: dict[str, Any]
    match_rate: float | None  # its greedy output against the baseline's
    p_value: float | None  # its sampled outputs against the baseline's


def objective_points(rows: Iterable[Any], space: SearchSpace, model: str) -> list[ObjectivePoint]:
    """The objective points of the complete, launched trials among ``rows`` on one target
    (another target's trials are never compared)."""
    point = (space.primary_workload, space.primary_concurrency)
    return [
        ObjectivePoint(
            r.number,
            dict(r.params),
            dict(m.metrics),
            r.lossless_match_rate,
            r.lossless_p_value,
        )
        for r in rows
        if r.state == TrialState.COMPLETE and r.reused_from is None
        if r.engine_config.get("model") == model
        for m in r.measurements
        if (m.workload, m.concurrency) == point
    ]


def _bound(m: dict[str, Any], name: str, which: str) -> float | None:
    st = (m.get("stats") or {}).get(name)
    if st and st.get("n", 1) >= 2:
        return st[which]
    return m.get(name)


def dominated_by(
    m: dict[str, Any], other: dict[str, Any], objectives: Sequence[tuple[str, str]]
) -> bool:
    """True when ``other`` beats ``m`` on every objective even with ``m`` at the favourable
    end of its 95% interval and ``other`` at its unfavourable end (strictly on one)."""
    strict = False
    for name, direction in objectives:
        maximize = direction == "maximize"
        mine = _bound(m, name, "ci95_high" if maximize else "ci95_low")
        theirs = _bound(other, name, "ci95_low" if maximize else "ci95_high")
        if mine is None or theirs is None:
            return False
        if maximize:
            if theirs < mine:
                return False
            strict = strict or theirs > mine
        else:
            if theirs > mine:
                return False
            strict = strict or theirs < mine
    return strict


def interval_text(m: dict[str, Any], objectives: Sequence[tuple[str, str]]) -> str:
    """Each objective's value and 95% interval, as the pruning evidence shows them."""
    parts = []
    for name, _ in objectives:
        lo, hi = _bound(m, name, "ci95_low"), _bound(m, name, "ci95_high")
        if lo is None or hi is None:
            parts.append(f"{name} {m.get(name)}")
        else:
            parts.append(f"{name} {m.get(name, float('nan')):.2f} [{lo:.2f}-{hi:.2f}]")
    return ", ".join(parts)


class DominancePruner:
    """A trial whose objective point is dominated beyond both 95% intervals by a feasible
    trial on the same target stops there (the space's SLO and lossless rule decide
    feasible)."""

    def __init__(self, space: SearchSpace) -> None:
        self.objectives = [(o.metric, o.resolved_direction) for o in space.objectives]
        self.concurrency = space.primary_concurrency
        self.limits = space.slo.limits()
        self.rules = lossless_rules(space)

    def evidence(self, m: dict[str, Any], measured: Iterable[ObjectivePoint]) -> str | None:
        """Why ``m`` (a trial's objective point) is clearly dominated by one of
        ``measured``, or None to go on measuring."""
        for number, _, om, rate, p_value in measured:
            ok, _ = feasible(
                om, self.limits, lossless_match_rate=rate, lossless_p_value=p_value, **self.rules
            )
            if ok and dominated_by(m, om, self.objectives):
                return (
                    f"pruned after concurrency {self.concurrency}: "
                    f"{interval_text(m, self.objectives)} is dominated by trial {number} "
                    f"({interval_text(om, self.objectives)}) even at the favourable end of its "
                    "95% interval; the other levels and the lossless check were skipped"
                )
        return None
