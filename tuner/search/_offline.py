"""Offline acceptance in the guided search: every proposer priced before its launch.

Where the prices come from: the baseline's stored prompt and output ids (greedy, or sampled
under the first workload's settings: ``token_sequences`` on its trial row), replayed through
each proposer (``tuner.offline``); for a replayed job (``engine.kind: replay``), the
surface's own ``offline_acceptance``.

What a price becomes: offline tau(k) times a step-cost model gives a predicted first
objective for every depth of every priced proposer from the baseline alone. A step costs
s(k) = s0 * (1 + f + c*k): f and c are learned from this job's launches of the same method
(least squares over its launched depths; one depth splits its extra cost evenly), else from
any launched method for c's verify part (the lowest, an n-gram lookup's being the verify cost
alone) plus, for a model, its own share: its size relative to the target's, scaled by what
launched model proposers cost over their size (a small model's per-forward overhead), else
a prior (c = 0.05 per drafted token plus the size share, f = 0), with a band that says so.
The optimistic value takes no overhead at all and the offline error's margin on every
position: a proposer whose optimistic value cannot beat the incumbent is not launched.
The baseline s0 and the launches the cost is learned from all ran the objective class's
batch at the objective level (``Layout.same_batch``, ``baseline_for``): a launch whose
requests queued at another running batch measured another load.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.hub import local_view
from tuner.methods import METHODS
from tuner.offline import UNPRICED_OTHER_TARGET, OfflinePrices, TokenSequence, price_proposers
from tuner.search._depth import (
    Calibration,
    DepthPoint,
    Prediction,
    predict_from_baseline,
    step_ms,
)
from tuner.search._layout import (
    MEASURED,
    Layout,
    baseline_for,
    calibration,
    config_key,
    family_key,
    primary,
)
from tuner.space import SearchSpace

__all__ = [
    "ACCEPTANCE_MARGIN",
    "StepCost",
    "offline_prediction",
    "offline_predictions",
    "offline_prices",
    "proposer_name",
    "step_costs",
]

# Offline minus engine per-position acceptance on the tiny pair was -0.04..+0.02
# (bench/offline_acceptance.py): the optimistic value adds this on every position.
ACCEPTANCE_MARGIN = 0.04
_VERIFY_PER_TOKEN = 0.05  # prior share of a step per drafted token verified
_PRIOR_SIGMA = 0.5  # relative band of a prediction on the prior cost alone
# Band when the verify part was measured on another method's launch: what is left to guess is
# the proposer's own share, scaled from its parameter count (this job's measured prediction
# error, ``calibration``, is added on top of it).
_VERIFY_SIGMA = 0.2
# Added when a model proposer's share is scaled from another launched model proposer's.
_SCALE_SIGMA = 0.1
# A depth launched once: its step cost is measured there (the acceptance, which differs by
# lookup or draft, is priced apart); what is left is the drafted count's own variation.
_SAME_DEPTH_SIGMA = 0.05


@dataclass(frozen=True)
class StepCost:
    """s(k) / s0 = 1 + fixed + per_token * k, and how sure it is (relative band)."""

    fixed: float
    per_token: float
    rel_sigma: float
    how: str
    # The one launched depth the split was taken at: there the step is measured, not split,
    # so the band grows from ``_SAME_DEPTH_SIGMA`` with the distance from it.
    anchor: int | None = None

    def band(self, k: int) -> float:
        """The relative band of a prediction at depth ``k``."""
        if self.anchor is None or self.anchor < 1:
            return self.rel_sigma
        far = min(1.0, abs(k - self.anchor) / self.anchor)
        return _SAME_DEPTH_SIGMA + (self.rel_sigma - _SAME_DEPTH_SIGMA) * far


def offline_prices(
    space: SearchSpace, rows: Sequence[Any], proposers: dict[str, dict[str, Any]]
) -> OfflinePrices | None:
    """Prices of ``proposers`` (family key -> its deepest configuration), each from the
    first baseline row of its own target with token sequences (an MTP checkpoint is its own
    target), or from a replayed surface; None when no baseline has any."""
    if not space.offline_pricing:
        return None
    if space.engine.kind == "replay":
        return _surface_prices(space)
    by_target: dict[str | None, dict[str, dict[str, Any]]] = {}
    for key, c in proposers.items():
        by_target.setdefault(c.get("target"), {})[key] = c
    by: dict[str, Any] = {}
    unpriced: dict[str, str] = {}
    bases: list[str] = []
    seconds = 0.0
    for target, own in by_target.items():
        row = next(
            (
                r
                for r in sorted(rows, key=lambda r: r.number)
                if r.params.get("method") == "none"
                and getattr(r, "token_sequences", None)
                and r.params.get("target") == target
            ),
            None,
        )
        if row is None:
            unpriced.update({k: UNPRICED_OTHER_TARGET for k in own})
            continue
        p = price_proposers(
            own,
            [TokenSequence.from_stored(s) for s in row.token_sequences],
            space.all_workloads[0].max_tokens,
            resolve=space.resolve_model,
            max_model_len=space.engine.max_model_len,
            device="cuda" if space.engine.device == "cuda" else "cpu",
            target=target or space.engine.model,
            sampling=_sampling(space),
        )
        by.update(p.by_proposer)
        unpriced.update(p.unpriced)
        bases.append(f"{p.basis} of trial {row.number}")
        seconds += p.seconds
    if not bases:
        return None
    return OfflinePrices(by, unpriced, "; ".join(bases), seconds)


def _sampling(space: SearchSpace) -> dict[str, Any] | None:
    """The settings the baseline's sequences were sampled under (``token_sequences``), or
    None when its first workload is greedy."""
    wl = space.all_workloads[0]
    if wl.sampling.greedy:
        return None
    return wl.sampling.unseeded()


def _surface_prices(space: SearchSpace) -> OfflinePrices | None:
    path = Path(space.resolve(space.engine.surface or ""))
    try:
        with path.open(encoding="utf-8") as f:
            header = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    table = header.get("offline_acceptance") if isinstance(header, dict) else None
    return OfflinePrices.from_json(table) if isinstance(table, dict) else None


def _size_ratio(space: SearchSpace, c: dict[str, Any]) -> float | None:
    """A proposer model's parameters over the target's, from their config.json files (read
    where they are on this machine; a hub model not in the cache: unknown)."""
    path = c.get("draft") or c.get("head")
    if not path:
        return None
    try:
        mine = _params(space.resolve_model(str(path)))
        theirs = _params(space.resolve_model(c.get("target") or space.engine.model))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return mine / theirs if theirs else None


@functools.lru_cache(maxsize=64)
def _params(model: str) -> float:
    """A model's parameter count from its config.json (read once per model: the guide asks
    on every proposal)."""
    view = local_view(model)
    if view is None:
        raise OSError(f"{model} is not on this machine")
    cfg = json.loads((view / "config.json").read_text())
    h, n = cfg["hidden_size"], cfg.get("num_hidden_layers", 1)
    inter = cfg.get("intermediate_size", 4 * h)
    return n * (4 * h * h + 3 * h * inter) + cfg.get("vocab_size", 0) * h


def step_costs(
    space: SearchSpace,
    launched: Sequence[tuple[dict[str, Any], DepthPoint]],
    baseline: DepthPoint | None,
    c: dict[str, Any],
    sizes: Mapping[str, float] | None = None,
) -> StepCost:
    """The step-cost model for proposer ``c`` from ``launched`` (params, depth point) of
    this job on the same target, at the objective level and ``baseline``'s running batch
    (the caller picks both). A step's extra cost per drafted
    token is the verify part (shared by every method) plus the proposer model's own share
    (its size over the target's: 0 for an n-gram lookup)."""
    s0 = step_ms(baseline) if baseline is not None else None
    extra: dict[str, list[tuple[int, float]]] = {}
    verify: list[float] = []
    models: list[tuple[dict[str, Any], float]] = []  # (a launched model proposer, e / k)
    if s0:
        for p, pt in launched:
            if (s := step_ms(pt)) is not None and pt.depth > 0:
                e = s / s0 - 1.0
                extra.setdefault(p["method"], []).append((pt.depth, e))
                verify.append(max(0.0, e / pt.depth - proposer_share(space, p, sizes)))
                if not METHODS[p["method"]].model_free:
                    models.append((p, e / pt.depth))
    own = extra.get(c["method"], [])
    if len({d for d, _ in own}) >= 2:
        n = len(own)
        md, me = sum(d for d, _ in own) / n, sum(e for _, e in own) / n
        b = sum((d - md) * (e - me) for d, e in own) / sum((d - md) ** 2 for d, _ in own)
        b = max(0.0, b)
        return StepCost(max(0.0, me - b * md), b, 0.1, "learned from its method's depths")
    if own:
        d, e = max(own)
        e = max(0.0, e)
        how = f"its method's one launched depth ({d}), split"
        return StepCost(e / 2, e / (2 * d), 0.25, how, anchor=d)
    v = min(verify) if verify else _VERIFY_PER_TOKEN
    share = proposer_share(space, c, sizes)
    scaled = _scaled_share(space, c, models, v, sizes)
    if scaled is not None:
        mult, band, n = scaled
        return StepCost(
            0.0,
            v + share * mult,
            band,
            f"verify cost from other methods' launches, its own share scaled by parameters "
            f"from {n} launched model proposer{'s' if n > 1 else ''} (x{mult:.2f} its size)",
        )
    if verify:
        return StepCost(0.0, v + share, _VERIFY_SIGMA, "verify cost from other methods' launches")
    return StepCost(0.0, v + share, _PRIOR_SIGMA, "prior")


def _scaled_share(
    space: SearchSpace,
    c: dict[str, Any],
    models: Sequence[tuple[dict[str, Any], float]],
    verify: float,
    sizes: Mapping[str, float] | None,
) -> tuple[float, float, int] | None:
    """(multiplier, band, launches) for a model proposer's own share of a step, from the
    launched model proposers: each says what its forwards cost over what its size alone
    predicts (``(e / k - verify) / size share``: a small model's per-forward overhead, which
    size alone ignores). The median multiplier (its method's own launches first) scales
    ``c``'s size share; the band is the verify band, plus the multipliers' own spread in log
    space, at least ``_SCALE_SIGMA`` (one other proposer says little of a second's)."""
    if METHODS[c["method"]].model_free:
        return None
    mults: dict[str, list[float]] = {}
    for p, per in models:
        share = proposer_share(space, p, sizes)
        if share > 0 and per > verify:
            mults.setdefault(p["method"], []).append((per - verify) / share)
    pool = mults.get(c["method"]) or [m for ms in mults.values() for m in ms]
    if not pool:
        return None
    logs = [math.log(m) for m in pool]
    mid = statistics.median(logs)
    sd = statistics.stdev(logs) if len(logs) > 1 else 0.0
    return math.exp(mid), _VERIFY_SIGMA + max(_SCALE_SIGMA, sd), len(pool)


def proposer_share(
    space: SearchSpace, c: dict[str, Any], sizes: Mapping[str, float] | None = None
) -> float:
    """A proposer's own share of a target step per drafted token: its size over the
    target's (0 for a lookup: n-gram, suffix trees; 0.1 for a draft, 0.03 for a head when
    unknown)."""
    if METHODS[c["method"]].model_free:
        return 0.0
    if sizes and (v := sizes.get(family_key(c))) is not None:
        return v
    ratio = _size_ratio(space, c)
    return ratio if ratio is not None else (0.1 if c["method"] == "draft_model" else 0.03)


def offline_prediction(
    k: int,
    per_position: Sequence[float],
    baseline: DepthPoint,
    objective: str,
    cost: StepCost,
    calibration: Calibration | float = 0.0,
    floor: float = 0.0,
    se: Sequence[float] | None = None,
    share: float = 1.0,
    drafted: float | None = None,
) -> tuple[Prediction, Prediction] | None:
    """(prediction, optimistic prediction) of depth ``k`` from the baseline alone; the
    optimistic one has no overhead but ``floor`` a drafted token (the proposer's own), and
    each position's acceptance raised by ``ACCEPTANCE_MARGIN`` or, for a sampled price, by
    twice its standard error ``se`` where that is more."""
    # A round is priced by what it drafts: only ``share`` of rounds draft (the others commit
    # one token at the baseline's cost), ``drafted`` tokens a round on average (k when not
    # known): per position, acceptance per round; the step, the fixed part per drafting
    # round and the per-token part per drafted token.
    per_position = [share * a for a in per_position]
    eff = (drafted if drafted is not None else k) / k
    pred = predict_from_baseline(
        k,
        per_position,
        baseline,
        objective,
        share * cost.fixed,
        cost.per_token * eff,
        cost.band(k),
    )
    errs = (list(se or ()) + [0.0] * len(per_position))[: len(per_position)]
    hi = [
        min(1.0, a + max(ACCEPTANCE_MARGIN, 2 * e))
        for a, e in zip(per_position, errs, strict=True)
    ]
    best = predict_from_baseline(k, hi, baseline, objective, 0.0, floor * eff, 0.0)
    if pred is None or best is None:
        return None
    notes = (
        *pred.notes,
        f"step cost: {cost.how} (fixed {cost.fixed:.2f}, {cost.per_token:.3f} a token)",
    )
    metrics = dict(pred.metrics)
    if isinstance(calibration, Calibration):
        sigma = calibration.band(pred.rel_sigma)
        if calibration.bias and objective in metrics:
            metrics[objective] = calibration.correct(float(metrics[objective]))
            notes = (*notes, f"x{math.exp(calibration.bias):.3f}: this job's measured bias")
    else:
        sigma = pred.rel_sigma + calibration
    return Prediction(k, metrics, sigma, pred.basis, pred.anchor, notes), best


def proposer_name(c: dict[str, Any]) -> str:
    keys = ("method", "num_speculative_tokens", "draft", "head", "prompt_lookup_min")
    return " ".join(f"{k}={c[k]}" for k in (*keys, "prompt_lookup_max") if c.get(k) is not None)


def offline_predictions(
    space: SearchSpace,
    rows: Sequence[Any],
    lay: Layout,
    prices: OfflinePrices | None,
    modelled: set[str],
) -> list[tuple[dict[str, Any], Prediction, Prediction]]:
    """(configuration, prediction, optimistic prediction) of every unlaunched depth of every
    priced proposer that the depth model does not price from its own launches
    (``modelled``: those it does, as ``config_key``)."""
    if prices is None:
        return []
    level = (space.primary_workload, space.primary_concurrency)
    metric = space.objectives[0].metric
    # The objective class's running batch only: a step cost or a baseline measured at
    # another running batch (requests queued) prices another load.
    launched = [
        r
        for r in rows
        if r.reused_from is None and r.state in MEASURED and lay.same_batch(r.params)
    ]
    cals: dict[str, Calibration] = {}
    out = []
    for fk, members in lay.families.items():
        if fk not in prices.by_proposer:
            continue
        target = members[0].get("target")
        bases, pts = [], []
        for r in launched:
            m = primary(r, level)
            if m is None or r.params.get("target") != target:
                continue
            if r.params.get("method") == "none":
                bases.append((r, DepthPoint(r.number, 0, m)))
            else:
                depth = int(r.params["num_speculative_tokens"])
                pts.append((dict(r.params), DepthPoint(r.number, depth, m)))
        base = baseline_for(bases, lay.place(members[0]), lay.concurrency)
        if base is None:
            continue
        cost = step_costs(space, pts, base, members[0], prices.size_ratio)
        floor = proposer_share(space, members[0], prices.size_ratio)
        method = str(members[0]["method"])
        if method not in cals:
            cals[method] = calibration(rows, metric, level, "offline", method, correct=True)
        cal = cals[method]
        for c in members:
            cand = lay.place(c)
            k = int(c["num_speculative_tokens"])
            acc = prices.get(fk, k)
            if acc is None or config_key(cand) in lay.taken or config_key(cand) in modelled:
                continue
            per_pos, se = acc.per_position_acceptance, acc.per_position_se
            got = offline_prediction(
                k,
                per_pos,
                base,
                metric,
                cost,
                cal,
                floor,
                se,
                acc.draft_share,
                acc.drafted_per_round,
            )
            if got is not None and metric in got[0].metrics:
                out.append((cand, *got))
    return out
