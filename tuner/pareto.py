"""Pareto selection over stored measurements, re-evaluated for any SLO without re-running.

Why not only ``study.best_trials``: Optuna's front is fixed to the SLO and concurrency the job
ran with; users ask "what if my SLO were 20 ms?" afterwards. ``pareto_mask`` is the same
non-domination rule, and a test checks it agrees with ``best_trials`` on the job's own SLO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select

from tuner.storage import JobModel, TrialModel, session_scope

__all__ = ["Point", "Report", "feasible", "job_report", "pareto_mask", "select_winner"]


@dataclass(frozen=True)
class Point:
    """One (configuration, workload, concurrency) measurement of a completed trial."""

    trial_number: int
    method: str
    params: dict[str, Any]
    engine_config: dict[str, Any]
    metrics: dict[str, Any]
    feasible: bool
    violations: tuple[str, ...]

    @property
    def concurrency(self) -> int:
        return int(self.metrics["concurrency"])


def feasible(metrics: dict[str, Any], slo: dict[str, float]) -> tuple[bool, tuple[str, ...]]:
    """A point is feasible when it meets every SLO limit and no request failed."""
    bad = []
    for name, limit in slo.items():
        v = metrics.get(name)
        if v is None or v > limit:
            bad.append(f"{name} {'n/a' if v is None else f'{v:.2f}'} > {limit:g}")
    if metrics.get("num_failed", 0):
        bad.append(f"{metrics['num_failed']} failed requests")
    return (not bad), tuple(bad)


def pareto_mask(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """True for rows no other row dominates (>= in every objective, > in one)."""
    if len(values) == 0:
        return np.zeros(0, dtype=bool)
    sign = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    loss = np.asarray(values, dtype=float) * sign
    n = len(loss)
    mask = np.ones(n, dtype=bool)
    for i in range(n):
        le = np.all(loss <= loss[i], axis=1)
        lt = np.any(loss < loss[i], axis=1)
        if np.any(le & lt):
            mask[i] = False
    return mask


def select_winner(front: Sequence[Point], objectives: Sequence[tuple[str, str]]) -> Point | None:
    """The front's best point by the first objective, the next ones breaking ties."""
    if not front:
        return None

    def key(p: Point) -> tuple:
        return tuple((-1 if d == "maximize" else 1) * float(p.metrics[m]) for m, d in objectives)

    return min(front, key=key)


@dataclass(frozen=True)
class Report:
    job_id: int
    workload: str
    concurrency: int
    slo: dict[str, float]
    objectives: list[tuple[str, str]]
    points: list[Point]
    front: list[Point]
    baseline: Point | None
    winner: Point | None

    def speedup(self, p: Point) -> float | None:
        if self.baseline is None or not self.baseline.metrics.get("output_tok_per_s"):
            return None
        return p.metrics["output_tok_per_s"] / self.baseline.metrics["output_tok_per_s"]


def job_report(
    url: str,
    job_id: int,
    *,
    workload: str | None = None,
    concurrency: int | None = None,
    slo: dict[str, float] | None = None,
) -> Report:
    """The feasible Pareto front of one job at one workload and concurrency level."""
    from tuner.study import JobNotFound, space_of_job

    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        if job is None:
            raise JobNotFound(f"job {job_id} not found")
        space = space_of_job(job)
        rows = s.scalars(
            select(TrialModel)
            .where(
                TrialModel.job_id == job_id,
                TrialModel.state == "complete",
                TrialModel.reused_from.is_(None),
            )
            .order_by(TrialModel.number)
        ).all()
        raw = [
            (r.number, r.method, r.params, r.engine_config, [m.metrics for m in r.measurements])
            for r in rows
        ]
    wl = workload or space.workload.name
    conc = concurrency or space.primary_concurrency
    limits = space.slo.limits() if slo is None else slo
    objectives = [(o.metric, o.resolved_direction) for o in space.objectives]
    points = []
    for number, method, params, ecfg, ms in raw:
        for m in ms:
            if m["workload"] == wl and m["concurrency"] == conc:
                ok, why = feasible(m, limits)
                points.append(Point(number, method, params, ecfg, m, ok, why))
    feas = [
        p
        for p in points
        if p.feasible and all(p.metrics.get(name) is not None for name, _ in objectives)
    ]
    vals = np.array([[p.metrics[name] for name, _ in objectives] for p in feas], dtype=float)
    mask = pareto_mask(vals, [d for _, d in objectives])
    front = [p for p, keep in zip(feas, mask, strict=True) if keep]
    base = next((p for p in points if p.method == "none"), None)
    return Report(
        job_id, wl, conc, limits, objectives, points, front, base, select_winner(front, objectives)
    )
