"""Offline acceptance in the guided search: every proposer priced before its launch.

Where the prices come from: the baseline's stored prompt and output ids (greedy, or sampled
under the first workload's settings: ``token_sequences`` on its trial row), replayed through
each proposer (``tuner.offline``); for a replayed job (``engine.kind: replay``), the
surface's own ``offline_acceptance``.

What a price becomes: offline tau(k) times a step-cost model (``_step_cost``) gives a
predicted first objective for every depth of every priced proposer from the baseline alone.
Where the engine says what its rounds hold (``_depth.round_cost``), a price is a round's: only
the share of rounds that draft accept anything, and a round costs what it drafts.
The optimistic value takes no overhead at all and the offline error's margin on every
position: a proposer whose optimistic value cannot beat the incumbent is not launched.
A method's bias is read at its launched proposers under the model as it now stands
(``_residual_bias``), so a sibling lookup is priced against the launched one; a method not
launched yet, at every launched proposer (the model holds each launch's measured step, so
what it misses there is the target's and the engine's, not that proposer's). The baseline s0
and the launches the cost is learned from all ran the objective class's
batch at the objective level (``Layout.same_batch``, ``baseline_for``): a launch whose
requests queued at another running batch measured another load.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuner.offline import UNPRICED_OTHER_TARGET, OfflinePrices, TokenSequence, price_proposers
from tuner.search._depth import (
    Calibration,
    DepthPoint,
    Prediction,
    predict_from_baseline,
    round_cost,
)
from tuner.search._layout import (
    MEASURED,
    Layout,
    baseline_for,
    calibration,
    config_key,
    family_key,
    own_noise,
    primary,
    shrink,
)
from tuner.search._step_cost import StepCost, proposer_share, step_costs
from tuner.space import SearchSpace

__all__ = [
    "ACCEPTANCE_MARGIN",
    "StepCost",
    "offline_prediction",
    "offline_predictions",
    "offline_prices",
    "priced_on",
    "proposer_name",
    "step_costs",
]

# Offline minus engine per-position acceptance on the tiny pair was -0.04..+0.02
# (bench/offline_acceptance.py): the optimistic value adds this on every position.
ACCEPTANCE_MARGIN = 0.04


def priced_on(rows: Sequence[Any], target: str | None) -> Any | None:
    """The baseline row whose token sequences price ``target``'s proposers: its first
    baseline with sequences; None while it has none (its proposers wait, unpriced)."""
    return next(
        (
            r
            for r in sorted(rows, key=lambda r: r.number)
            if r.params.get("method") == "none"
            and getattr(r, "token_sequences", None)
            and r.params.get("target") == target
        ),
        None,
    )


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
        row = priced_on(rows, target)
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
    shared: dict[Any, float | None] = {}  # by target: the miss at every launched proposer
    noise = own_noise(rows, metric, level, space.stop_launch_noise)
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
        by_round = round_cost(base) is not None
        floor = proposer_share(space, members[0], prices.size_ratio)
        method = str(members[0]["method"])
        if method not in cals:
            cal = calibration(rows, metric, level, "offline", method, correct=True, noise=noise)
            # Its own launches where it has them; else every launched proposer's: at a launch
            # the model holds the step it measured, so what it still misses there is the
            # target's and the engine's (time outside decode steps, tokens a step against
            # the replay's), not that proposer's cost. (Tried before ``line_fit`` held the
            # step line at or above the baseline's, and dropped: a clipped line missed a real
            # job's suffix launches 2.4x, and that miss priced an n-gram at 3.2x its run.)
            own = [(p, pt) for p, pt in pts if p["method"] == method]
            if own:
                resid = _residual_bias(space, own, pts, base, prices, metric)
            elif target not in shared:  # the same for every method not launched yet
                resid = shared[target] = _residual_bias(space, pts, pts, base, prices, metric)
            else:
                resid = shared[target]
            cals[method] = cal if resid is None else dataclasses.replace(cal, bias=resid)
        cal = cals[method]
        for c in members:
            cand = lay.place(c)
            k = int(c["num_speculative_tokens"])
            acc = prices.get(fk, k)
            if acc is None or config_key(cand) in lay.taken or config_key(cand) in modelled:
                continue
            per_pos, se = acc.per_position_acceptance, acc.per_position_se
            # Rounds priced by what they draft only where the step is a round's (the
            # engine said what its rounds hold): one scale for the cost and the price.
            rounds = (acc.draft_share, acc.drafted_per_round) if by_round else (1.0, None)
            got = offline_prediction(k, per_pos, base, metric, cost, cal, floor, se, *rounds)
            if got is not None and metric in got[0].metrics:
                out.append((cand, *got))
    return out


def _residual_bias(
    space: SearchSpace,
    own: Sequence[tuple[dict[str, Any], DepthPoint]],
    launched: Sequence[tuple[dict[str, Any], DepthPoint]],
    base: DepthPoint,
    prices: OfflinePrices,
    metric: str,
) -> float | None:
    """The offline model's bias on a method, read where it is now: the median log ratio of
    each launched proposer of the method (``own``; every launched proposer, for a method not
    launched yet) to what the model as it stands (its step cost learned from these launches)
    predicts of that very launch, shrunk for launch noise (``_layout.shrink``). None where no
    such launch is priced.

    Why not the stored predictions' errors: those were made before the step cost was learned
    from the launches, so their bias is mostly the prior's, which the learned cost already
    replaced. The model at a launched proposer holds what the launch cannot teach it (the
    engine's tokens per step against the offline replay's, the time outside decode steps);
    that part is shared by the method's other proposers, so a sibling lookup is priced
    against the launched one, not against the baseline alone."""
    by_round = round_cost(base) is not None
    logs = []
    for p, pt in own:
        fk = family_key(p)
        acc = prices.get(fk, pt.depth)
        value = pt.metrics.get(metric)
        if acc is None or not value or float(value) <= 0:
            continue
        cost = step_costs(space, launched, base, p, prices.size_ratio)
        rounds = (acc.draft_share, acc.drafted_per_round) if by_round else (1.0, None)
        got = offline_prediction(
            pt.depth, acc.per_position_acceptance, base, metric, cost, 0.0, 0.0, None, *rounds
        )
        model = got[0].metrics.get(metric) if got is not None else None
        if model and float(model) > 0:
            logs.append(math.log(float(value) / float(model)))
    if not logs:
        return None
    return statistics.median(logs) * shrink(len(logs))
