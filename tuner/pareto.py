"""Pareto selection over stored measurements, re-evaluated for any SLO without re-running.

Why not only ``study.best_trials``: Optuna's front is fixed to the SLO and concurrency the job
ran with; users ask "what if my SLO were 20 ms?" afterwards. ``pareto_mask`` is the same
non-domination rule, and a test checks it agrees with ``best_trials`` on the job's own SLO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuner.baselines import Baselines, latency_decides
from tuner.launch_history import job_spreads
from tuner.launches import (
    BETWEEN,
    WITHIN,
    IntervalKind,
    LaunchSpread,
    launch_count,
    launch_interval,
    launch_values,
    level_spreads,
    noise_reason,
    ratio_interval,
)
from tuner.space import GREEDY, SearchSpace
from tuner.storage import Store, space_of_job
from tuner.verdict import Verdict, crossover_concurrency, verdicts

__all__ = [
    "Point",
    "Reference",
    "Report",
    "Verdict",
    "crossover_concurrency",
    "feasible",
    "lossless_rules",
    "job_report",
    "level_spreads",
    "pareto_mask",
    "score",
    "select_winner",
    "verdicts",
]


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
    lossless_match_rate: float | None = None
    kv_cache_tokens: int | None = None
    peak_rss_mb: float | None = None
    lossless_p_value: float | None = None

    @property
    def concurrency(self) -> int:
        return int(self.metrics["concurrency"])


def lossless_rules(space: SearchSpace) -> dict[str, float | None]:
    """The space's lossless limits as ``feasible`` takes them (None: the check is off)."""
    on = space.lossless.enabled
    return {
        "min_match_rate": space.lossless.min_match_rate if on else None,
        "alpha": space.lossless.alpha if on else None,
    }


def feasible(
    metrics: dict[str, Any],
    slo: dict[str, float],
    *,
    lossless_match_rate: float | None = None,
    min_match_rate: float | None = None,
    lossless_p_value: float | None = None,
    alpha: float | None = None,
    noise_counts: bool = True,
) -> tuple[bool, tuple[str, ...]]:
    """A point is feasible when it meets every SLO limit, no request failed, its repeats
    agree (not noisy; ``noise_counts`` False for the baseline, which every verdict needs:
    noise widens its interval, it never removes it), its greedy outputs match the baseline's
    well enough, and its sampled outputs are not told apart from the baseline's at
    ``alpha``."""
    bad = []
    for name, limit in slo.items():
        v = metrics.get(name)
        if v is None or v > limit:
            bad.append(f"{name} {'n/a' if v is None else f'{v:.2f}'} > {limit:g}")
    if metrics.get("num_failed", 0):
        bad.append(f"{metrics['num_failed']} failed requests")
    if metrics.get("noisy") and noise_counts:
        bad.append(noise_reason(metrics))
    if (
        lossless_match_rate is not None
        and min_match_rate is not None
        and lossless_match_rate < min_match_rate
    ):
        bad.append(f"greedy match {lossless_match_rate:.0%} < {min_match_rate:.0%}")
    if lossless_p_value is not None and alpha is not None and lossless_p_value < alpha:
        bad.append(
            f"sampled outputs differ from the baseline's distribution "
            f"(p={lossless_p_value:.2g} < {alpha:g})"
        )
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


def score(p: Point, metric: str) -> float:
    """The noise-aware score the study ranked on, or the plain value for a single run."""
    return float((p.metrics.get("score") or {}).get(metric, p.metrics[metric]))


def select_winner(front: Sequence[Point], objectives: Sequence[tuple[str, str]]) -> Point | None:
    """The front's best point by the first objective, the next ones breaking ties."""
    if not front:
        return None

    def key(p: Point) -> tuple:
        return tuple((-1 if d == "maximize" else 1) * float(p.metrics[m]) for m, d in objectives)

    return min(front, key=key)


@dataclass(frozen=True)
class Reference:
    """A hosted endpoint measured in the job, at the report's workload and level: a reference
    row beside the trials, never on the front (there is nothing of it to configure)."""

    name: str
    base_url: str
    model: str
    metrics: dict[str, Any] | None
    feasible: bool
    violations: tuple[str, ...]
    error: str | None = None


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
    verdicts: dict[int, list[Verdict]]
    crossover: dict[int, int | None]
    baseline_by_conc: dict[int, dict[str, Any]]
    replay_surface: str | None = None  # set when the job replayed a recorded surface
    target: str = ""  # the served checkpoint every point here shares (with its own baseline)
    other_targets: tuple[str, ...] = ()  # checkpoints this job also measured, reported apart
    references: tuple[Reference, ...] = ()  # hosted endpoints measured on the same workload
    pruned: tuple[Point, ...] = ()  # stopped after their objective point: verdicts, no front
    # The between-launch spread at this report's level, by metric, history pooled in (empty:
    # nothing launched twice here or on this machine before: intervals within one launch).
    spreads: dict[str, LaunchSpread] = field(default_factory=dict)
    # The workload's sampling settings (what every request of this report carried).
    sampling: dict[str, Any] = field(default_factory=lambda: dict(GREEDY))
    endpoint: str = "completions"  # chat: through the model's chat template

    @property
    def prompt_tokens_mean(self) -> float | None:
        """Prompt tokens a request as the engine counted them, at the baseline's point."""
        return self.baseline.metrics.get("prompt_tokens_mean") if self.baseline else None

    # Which baseline each speculative trial is compared with (its batch class's).
    baselines: Baselines = field(default_factory=lambda: Baselines(None))
    # Every trial's points at every level of this workload: trial -> level -> metrics.
    measured: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)

    @property
    def latency_decides(self) -> bool:
        """TTFT and end-to-end decide: the SLO limits them, or a point queued."""
        return latency_decides(self.slo, self.measured, self.baselines.seqs)

    def interval(self, p: Point, metric: str) -> tuple[float, float, IntervalKind] | None:
        """95% interval of ``p``'s ``metric``: where one more launch lands, from its launches
        and the job's spread, or from one launch's repeats when the job has no spread
        (None: neither)."""
        spread = self.spreads.get(metric)
        values = launch_values(p.metrics, metric)
        if spread is not None and values:
            _, lo, hi = launch_interval(values, spread)
            return lo, hi, BETWEEN
        st = (p.metrics.get("stats") or {}).get(metric)
        if not st or (st.get("n") or 0) < 2 or st.get("ci95_low") is None:
            return None
        return max(0.0, float(st["ci95_low"])), float(st["ci95_high"]), WITHIN

    @property
    def winner_confirmed(self) -> bool:
        """The winner was launched at least twice (undisturbed launches)."""
        return self.winner is not None and launch_count(self.winner.metrics) >= 2

    def indistinguishable(self, a: Point, b: Point) -> bool:
        """Whether the job cannot tell ``a`` from ``b`` on its first objective: the 95%
        interval of their ratio holds 1 (launch-aware; else the repeats' intervals overlap)."""
        metric = self.objectives[0][0]
        spread = self.spreads.get(metric)
        va, vb = launch_values(a.metrics, metric), launch_values(b.metrics, metric)
        if spread is not None and va and vb:
            _, lo, hi = ratio_interval(va, vb, spread)
            return lo <= 1.0 <= hi
        ia, ib = self.interval(a, metric), self.interval(b, metric)
        if ia is None or ib is None:
            return False
        return ia[0] <= ib[1] and ib[0] <= ia[1]

    @property
    def equivalent_to_winner(self) -> list[Point]:
        """Feasible configurations the job cannot tell apart from the winner, best first."""
        w = self.winner
        if w is None:
            return []
        metric, direction = self.objectives[0]
        sign = -1.0 if direction == "maximize" else 1.0
        same = [
            p
            for p in self.points
            if p.feasible and p.trial_number != w.trial_number and self.indistinguishable(p, w)
        ]
        return sorted(same, key=lambda p: sign * float(p.metrics.get(metric) or 0.0))

    def baseline_of(self, p: Point) -> Point | None:
        """The baseline point ``p`` is compared with: its batch class's, else the main one."""
        n = self.baselines.for_trial(p.trial_number)
        return next((b for b in self.points if b.trial_number == n), None)

    def verdict(self, p: Point) -> Verdict | None:
        """The round-cost verdict of ``p`` at this report's concurrency (None: the baseline
        itself, or nothing to compare with)."""
        return next(
            (v for v in self.verdicts.get(p.trial_number, []) if v.concurrency == p.concurrency),
            None,
        )

    def speedup(self, p: Point) -> float | None:
        """Per-token speedup over the baseline, read from the verdict (1 for the baseline)."""
        if self.baseline is not None and p.trial_number == self.baseline.trial_number:
            return 1.0
        v = self.verdict(p)
        return None if v is None else v.speedup


def job_report(
    store: Store,
    job_id: int,
    *,
    workload: str | None = None,
    concurrency: int | None = None,
    slo: dict[str, float] | None = None,
    target: str | None = None,
    history: bool = True,
) -> Report:
    """The feasible Pareto front of one job at one workload and concurrency level, with the
    round-cost verdict of every speculative configuration at every measured level.

    Only trials served from one checkpoint (``target``; default engine.model) are compared:
    a method that serves another checkpoint (an MTP model) is another target, with its own
    baseline, front and verdicts in ``job_report(..., target=that)``. JobNotFound when the
    job does not exist; ValueError for a target it did not measure. A stored space today's
    rules refuse is read with defaults for the refused fields (``space_of_job``). Intervals
    pool the machine's history (``tuner.launch_history``) unless ``history`` is False."""
    space = space_of_job(store.job(job_id), for_reading=True)
    rows = store.trials(job_id, states=("complete", "pruned"), launched_only=True)
    pruned_numbers = {r.number for r in rows if r.state == "pruned"}
    main = space.resolve_model(space.engine.model)
    tgt = target or main
    seen = [main] + [r.engine_config.get("model") for r in rows]
    if target is not None and target not in seen:
        raise ValueError(f"target {target!r} was not measured in job {job_id}")
    others = tuple(dict.fromkeys(t for t in seen if t != tgt and t))
    rows = [r for r in rows if (r.engine_config.get("model") or main) == tgt]
    wl = workload or space.primary_workload
    conc = concurrency or space.primary_concurrency
    limits = space.slo.limits() if slo is None else slo
    objectives = [(o.metric, o.resolved_direction) for o in space.objectives]
    points = []
    pruned = []
    by_trial: dict[int, dict[int, dict[str, Any]]] = {}
    for r in rows:
        rate = r.lossless_match_rate
        for m in (dict(mm.metrics) for mm in r.measurements):
            if m["workload"] != wl:
                continue
            by_trial.setdefault(r.number, {})[m["concurrency"]] = m
            if m["concurrency"] == conc:
                ok, why = feasible(
                    m,
                    limits,
                    lossless_match_rate=rate,
                    lossless_p_value=r.lossless_p_value,
                    noise_counts=r.method != "none",
                    **lossless_rules(space),
                )
                p = Point(
                    r.number,
                    r.method,
                    dict(r.params),
                    dict(r.engine_config),
                    m,
                    ok,
                    why,
                    rate,
                    r.kv_cache_tokens,
                    r.peak_rss_mb,
                    r.lossless_p_value,
                )
                # A pruned trial keeps its measured point and verdict, never the front.
                (pruned if r.number in pruned_numbers else points).append(p)
    references = []
    for ref in store.references(job_id):
        ms = list(ref.measurements or [])
        m = next((m for m in ms if m["workload"] == wl and m["concurrency"] == conc), None)
        if ref.state != "complete" or m is None:
            references.append(
                Reference(
                    ref.name, ref.base_url, ref.model, None, False, ("not measured",), ref.error
                )
            )
            continue
        ok, why = feasible(m, limits)
        references.append(Reference(ref.name, ref.base_url, ref.model, m, ok, why))
    feas = [
        p
        for p in points
        if p.feasible and all(p.metrics.get(name) is not None for name, _ in objectives)
    ]
    vals = np.array([[score(p, name) for name, _ in objectives] for p in feas], dtype=float)
    mask = pareto_mask(vals, [d for _, d in objectives])
    front = [p for p, keep in zip(feas, mask, strict=True) if keep]
    bases = Baselines.of(rows, space.concurrency, space.primary_concurrency)
    base = next((p for p in points if p.trial_number == bases.main), None)
    spreads = job_spreads(store if history else None, job_id, tgt, by_trial, objectives)
    per_token = {c: sp.get("ms_per_token") for c, sp in spreads.items()}
    vd: dict[int, list[Verdict]] = {}
    cross: dict[int, int | None] = {}
    for r in rows:
        if r.method == "none" or r.number not in by_trial:
            continue
        own_n = bases.for_trial(r.number)
        own = by_trial.get(own_n, {}) if own_n is not None else {}
        vd[r.number] = verdicts(by_trial[r.number], own, per_token)
        cross[r.number] = crossover_concurrency(vd[r.number])
    return Report(
        job_id=job_id,
        workload=wl,
        concurrency=conc,
        slo=limits,
        objectives=objectives,
        points=points,
        front=front,
        baseline=base,
        winner=select_winner(front, objectives),
        verdicts=vd,
        crossover=cross,
        baseline_by_conc=by_trial.get(bases.main, {}) if bases.main is not None else {},
        replay_surface=space.resolve(space.engine.surface) if space.engine.surface else None,
        sampling=next(
            (w.sampling.request() for w in space.all_workloads if w.name == wl), dict(GREEDY)
        ),
        endpoint=next((w.endpoint for w in space.all_workloads if w.name == wl), "completions"),
        target=tgt,
        other_targets=others,
        references=tuple(references),
        pruned=tuple(pruned),
        spreads=spreads.get(conc, {}),
        baselines=bases,
        measured=by_trial,
    )
