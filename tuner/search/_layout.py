"""What the guide reads of a job, shared by its parts: proposals, proposer families, the
job's layout of configurations, the baseline a proposer is priced against.

Every depth model and price here is made at the objective level, among launches of one
running batch there (min(concurrency, max_num_seqs), ``tuner.space._batch``): a launch that
queued requests at another running batch measured another engine load, and mixing the two
would price the queue as the proposer's cost."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.candidates import grid_configs
from tuner.launches import pooled_spread, spread_values
from tuner.search._depth import Calibration, DepthPoint
from tuner.space import SearchSpace, running_batch
from tuner.storage import TrialState, search_launch

__all__ = [
    "MEASURED",
    "Layout",
    "Proposal",
    "baseline_for",
    "calibration",
    "config_key",
    "family_key",
    "primary",
    "shrink",
]

MEASURED = (TrialState.COMPLETE, TrialState.PRUNED)  # a launch that measured its first point
FREE = ("num_speculative_tokens", "max_num_seqs", "memory_fraction")


@dataclass(frozen=True)
class Proposal:
    """One configuration the guide wants launched next (a trial's plain ``params``)."""

    params: dict[str, Any]
    by: str  # "guide: scan" or "guide: depth"
    why: str
    predicted: dict[str, Any] | None = None
    skipped: tuple[str, ...] = ()  # proposers not launched: their optimism cannot win


def family_key(params: dict[str, Any]) -> str:
    """A proposer: everything but depth, batch size and memory share."""
    return json.dumps({k: v for k, v in params.items() if k not in FREE}, sort_keys=True)


def config_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def primary(row: Any, level: tuple[str, int]) -> dict[str, Any] | None:
    for m in row.measurements:
        if (m.workload, m.concurrency) == level:
            return dict(m.metrics)
    return None


PRIOR_COST_NOTE = "step cost: prior"


def prediction_source(predicted: dict[str, Any]) -> str | None:
    """Which model made a stored prediction: "offline" (offline price x step-cost model),
    "depth" (the depth model of a launched proposer), or None for an offline one on the
    prior step cost, which the first speculative launch replaces for good."""
    notes = [str(n) for n in predicted.get("notes") or []]
    if any(n.startswith(PRIOR_COST_NOTE) for n in notes):
        return None
    return "offline" if any(n.startswith("step cost:") for n in notes) else "depth"


# A model's bias is systematic (a structural miss of the step-cost model, the same at every
# configuration of a method), a launch's error around it is launch noise: the normal-normal
# posterior mean of the bias shrinks the measured median by tau^2 / (tau^2 + sigma^2 / n).
_BIAS_PRIOR_SD = 0.25  # the step-cost model's a-priori band
# A launch's own error: the prior the search's noise discount takes too (one number).
_LAUNCH_NOISE_SD = float(SearchSpace.model_fields["stop_launch_noise"].default)


def shrink(n: int) -> float:
    """How much of a median error over ``n`` launches is the model's bias, not noise."""
    return _BIAS_PRIOR_SD**2 / (_BIAS_PRIOR_SD**2 + _LAUNCH_NOISE_SD**2 / n)


def calibration(
    rows: Iterable[Any],
    metric: str,
    level: tuple[str, int],
    source: str | None = None,
    method: str | None = None,
    correct: bool = False,
    noise: float = 0.0,
) -> Calibration:
    """The median relative error of this job's earlier predictions of ``metric`` (only
    those ``source`` made, of ``method``'s proposers, when given). Why by source: a prior's
    error says nothing of a model fitted on launches, nor the offline model's of the depth
    model's; by method: a draft model's step cost is scaled from other launches, an n-gram's
    is its own method's, so one's error says little of the other's. With ``correct`` the
    median log error (shrunk) is the model's bias (``Calibration.correct``) and the band is
    the errors' scale around it. ``noise``: what one launch moves by (log sd; ``own_noise``,
    else the space's ``stop_launch_noise``): each error is measured on a launch, whose own
    noise is in it and is not the model's; only what is left counts (errors² = model² +
    noise², on the normal scale). The anchor's noise is in it too, but only once-launched
    anchors carry all of it, so it stays (an upper bound would narrow bands for nothing)."""
    errs = []
    for r in rows:
        predicted = (getattr(r, "search", None) or {}).get("predicted") or {}
        pred = predicted.get("value")
        if source is not None and prediction_source(predicted) != source:
            continue
        if method is not None and (getattr(r, "params", None) or {}).get("method") != method:
            continue
        m = primary(r, level) if r.state == TrialState.COMPLETE else None
        m = search_launch(m) if m else None
        if pred and m and m.get(metric) and (pred > 0) == (float(m[metric]) > 0):
            errs.append(math.log(float(m[metric]) / pred))
    if not errs:
        return Calibration()
    bias = statistics.median(errs) * shrink(len(errs)) if correct else 0.0
    scale = statistics.median(abs(math.expm1(e - bias)) for e in errs)
    if noise > 0:
        # The measured launch's own noise taken out of the errors' normal scale (median /
        # 0.6745): what is left is the model's.
        sd = scale / 0.6745
        scale = 0.6745 * math.sqrt(max(0.0, sd * sd - noise * noise))
    return Calibration(min(0.5, scale), len(errs), bias)  # scale: the plain error when no bias


def own_noise(
    rows: Iterable[Any], metric: str, level: tuple[str, int], prior: float = 0.0
) -> float:
    """What one launch moves by in this job (log sd of ``metric``, pooled over what it
    launched more than once at ``level``); ``prior`` (the space's ``stop_launch_noise``)
    before anything was launched twice, or where the spread is nil."""
    pts = [m for r in rows if (m := primary(r, level)) is not None]
    spread = pooled_spread(spread_values(m, metric) for m in pts)
    return (spread.log_sd if spread is not None else 0.0) or prior


def baseline_for(
    bases: list[tuple[Any, DepthPoint]], where: dict[str, Any], concurrency: int
) -> DepthPoint | None:
    """The baseline launch to price depth 0 with, among those of the proposer's running batch
    at ``concurrency`` (the objective level; None when there is none): the one at the
    proposer's batch size and memory share, else the one with the largest KV cache (a
    baseline short of KV cache preempts, and its step time would say nothing about the
    proposer's)."""
    run = running_batch(where["max_num_seqs"], concurrency)
    same = [b for b in bases if running_batch(b[0].params["max_num_seqs"], concurrency) == run]
    for r, p in same:
        if all(r.params.get(k) == where.get(k) for k in ("max_num_seqs", "memory_fraction")):
            return p
    if not same:
        return None
    return max(same, key=lambda b: (b[0].kv_cache_tokens or 0, -b[1].trial))[1]


@dataclass(frozen=True)
class Layout:
    """The space's proposers and what the job took of them, read once per proposal."""

    families: dict[str, list[dict[str, Any]]]  # proposer -> its configurations in the grid
    started: set[str]  # proposers with at least one trial
    taken: set[str]  # configurations that ran, run or failed (the store has no waiting row)
    max_num_seqs: int  # the objective class's batch size (``objective_max_num_seqs``)
    memory_for: Callable[[dict[str, Any]], float]
    concurrency: int  # the objective level

    @classmethod
    def of(
        cls,
        space: SearchSpace,
        rows: Sequence[Any],
        memory_for: Callable[[dict[str, Any]], float],
        grid: Sequence[dict[str, Any]] | None,
    ) -> Layout:
        families: dict[str, list[dict[str, Any]]] = {}
        for c in grid if grid is not None else grid_configs(space):
            if c["method"] != "none":
                families.setdefault(family_key(c), []).append(c)
        started = {family_key(r.params) for r in rows if r.params.get("method") != "none"}
        taken = {config_key(r.params) for r in rows}
        seqs = space.objective_max_num_seqs
        return cls(families, started, taken, seqs, memory_for, space.primary_concurrency)

    def place(self, c: dict[str, Any]) -> dict[str, Any]:
        """Where the guide launches ``c``: the objective class's member (its smallest batch
        size, the family's memory share)."""
        return {**c, "max_num_seqs": self.max_num_seqs, "memory_fraction": self.memory_for(c)}

    def same_batch(self, params: dict[str, Any]) -> bool:
        """Whether a launch ran the objective class's batch at the objective level."""
        seqs = params.get("max_num_seqs")
        if seqs is None:
            return False
        c = self.concurrency
        return running_batch(seqs, c) == running_batch(self.max_num_seqs, c)
