"""What to launch next, from what speculative decoding's structure says about the space.

Why not leave it to the sampler: a generic sampler treats depth, batch size and memory share
as independent blind axes and needs many launches to learn that most of them do not matter.
Here one launch per proposer (at its largest depth) prices every depth of that proposer
(``_depth``), batch size and memory are collapsed into classes (``_classes``), and the
launches go where the predictions say the objective can still improve:

1. scan: each proposer not launched yet, once, at its largest depth: first one of each
   method (prior order EAGLE-3, EAGLE, MTP, draft model, n-gram; ``start_with`` is launched
   before the guide speaks), then the other members of the methods with the best potential
   (the best they measured or predict for a depth);
2. exploit: the unlaunched depth whose predicted first objective is best: before any scan
   when it beats the incumbent by more than its band (a confident gain), after the scans of
   methods that can still win when its optimistic value beats the incumbent; members of a
   method whose potential trails the incumbent are scanned last;
3. offline pricing (``_offline``): a proposer priced on the baseline's greedy outputs is
   never scanned; each of its depths is predicted from the baseline and a step-cost model,
   a method not launched yet whose optimism beats every prediction goes first, and one
   whose optimism cannot beat the incumbent is not launched (``Proposal.skipped``);
4. batch classes (``_batches``): all of the above happens in the objective class (the
   ``max_num_seqs`` whose running batch at the objective level is largest); once nothing is
   left there, each other batch class (one that queues requests at some level) gets the
   baseline and the incumbent's configuration, one launch each, so speculation is always
   compared with the same target without it at the same running batch;
5. once the job has a winner, its outlook (``_stop``) picks among the priced depths that
   are still worth a launch the one with the largest expected gain, which may differ from
   the guide's best centre; a scan or another batch class's launch stands as proposed;
6. when none is left the guide is silent and Optuna's sampler proposes (its proposals
   are still collapsed into classes, so a repeat costs no launch).

A prediction is stored with the trial it launched and shown with its error once measured;
it is never stored or shown as a measurement.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tuner.offline import OfflinePrices
from tuner.pareto import feasible, lossless_rules
from tuner.search._batches import class_launch
from tuner.search._classes import memory_family
from tuner.search._depth import DepthPoint, Prediction, fixed_share_of, predict_depth
from tuner.search._layout import (
    MEASURED,
    Layout,
    Proposal,
    baseline_for,
    calibration,
    config_key,
    family_key,
    own_noise,
    primary,
)
from tuner.search._offline import ACCEPTANCE_MARGIN, offline_predictions, proposer_name
from tuner.search._predicted import PredictedPoint
from tuner.space import SearchSpace
from tuner.storage import TrialState

__all__ = [
    "Proposal",
    "calibration",
    "depth_predictions",
    "family_key",
    "family_memory",
    "predicted_points",
    "propose",
]


_PRIOR = ("eagle3", "eagle", "mtp", "draft_model", "suffix", "ngram")


def propose(
    space: SearchSpace,
    rows: Sequence[Any],
    memory_for: Callable[[dict[str, Any]], float],
    grid: Sequence[dict[str, Any]] | None = None,
    prices: OfflinePrices | None = None,
) -> Proposal | None:
    """The next launch, or None to leave it to the sampler.

    ``rows``: the job's stored trials (params, state, measurements, search notes; running
    ones too); ``memory_for(params)``: the memory share to launch a proposer's family at
    (its class representative)."""
    level = (space.primary_workload, space.primary_concurrency)
    metric = space.objectives[0].metric
    sign = 1.0 if space.objectives[0].resolved_direction == "maximize" else -1.0
    limits = space.slo.limits()
    rules = lossless_rules(space)
    launched = [r for r in rows if r.reused_from is None and r.state in MEASURED]
    lay = Layout.of(space, rows, memory_for, grid)

    # A proposer counts as scanned once its largest depth ran or runs (a start point at a
    # smaller depth prices only the depths below it), or once it failed.
    deepest = {
        fk: lay.place(max(ms, key=lambda c: c["num_speculative_tokens"]))
        for fk, ms in lay.families.items()
    }
    tried = {fk for fk, c in deepest.items() if config_key(c) in lay.taken}
    tried |= {family_key(r.params) for r in rows if r.state == TrialState.FAIL}
    priced = set(prices.by_proposer) if prices is not None else set()
    tried |= priced  # priced proposers are launched by their prediction, not scanned

    incumbent: float | None = None
    for r in launched:
        m = primary(r, level)
        if r.state != TrialState.COMPLETE or m is None or m.get(metric) is None:
            continue
        ok, _ = feasible(
            m,
            limits,
            lossless_match_rate=r.lossless_match_rate,
            lossless_p_value=r.lossless_p_value,
            **rules,
        )
        if ok and (incumbent is None or sign * m[metric] > sign * incumbent):
            incumbent = float(m[metric])

    # A method's potential: the best it measured or predicts for one of its depths (signed:
    # larger is better).
    potential: dict[str, float] = {}
    for r in launched:
        m = primary(r, level)
        if m is not None and m.get(metric) is not None:
            name, v = r.params["method"], sign * float(m[metric])
            potential[name] = max(v, potential.get(name, v))
    best: tuple[float, Proposal] | None = None
    modelled_preds = depth_predictions(space, rows, lay)
    for cand, pred in modelled_preds:
        if not feasible(pred.metrics, limits)[0]:
            continue
        v = sign * pred.metrics[metric]
        potential[cand["method"]] = max(v, potential.get(cand["method"], v))
        if best is None or v > best[0]:
            best = (v, _depth_proposal(cand, pred, metric, level, incumbent))

    inc = None if incumbent is None else sign * incumbent
    modelled_best = None if best is None else best[0]
    methods_launched = {r.params.get("method") for r in launched}
    skipped: list[str] = []
    offline_best: tuple[float, Proposal] | None = None
    explore: tuple[float, Proposal] | None = None
    modelled = {config_key(c) for c, _ in modelled_preds}
    for cand, pred, optimistic in offline_predictions(space, rows, lay, prices, modelled):
        if not feasible(pred.metrics, limits)[0]:
            continue
        v, v_hi = sign * pred.metrics[metric], sign * optimistic.metrics[metric]
        if inc is not None and v_hi <= inc:
            skipped.append(
                f"{proposer_name(cand)}: even with no overhead but its own and acceptance "
                f"+{ACCEPTANCE_MARGIN:g} (or twice a sampled price's error) a position, {metric} "
                f"{optimistic.metrics[metric]:.4g} cannot beat the incumbent {incumbent:.4g}"
            )
            continue
        potential[cand["method"]] = max(v, potential.get(cand["method"], v))
        prop = replace(_depth_proposal(cand, pred, metric, level, incumbent), by="guide: offline")
        if offline_best is None or v > offline_best[0]:
            offline_best = (v, prop)
        # A method not launched yet whose optimism beats everything predicted so far: its
        # step cost is a guess until one launch of it measures it.
        new = cand["method"] not in methods_launched
        if new and (modelled_best is None or v_hi > modelled_best):
            if explore is None or v > explore[0]:
                explore = (v, prop)
    if offline_best is not None and (best is None or offline_best[0] > best[0]):
        best = offline_best
    scan, hopeless = _next_scan(lay, tried, potential, inc)
    confident = hopeful = None
    if best is not None:
        value, prop = best
        sigma = float(prop.predicted["rel_sigma"])  # type: ignore[index]
        if inc is None or value - inc > abs(value) * sigma:
            confident = prop
        elif value + abs(value) * sigma > inc:
            hopeful = prop
    # A method priced offline but never launched whose optimism beats every prediction
    # first (its best predicted depth); a confident gain; a priced proposer predicted to
    # beat the incumbent; the proposers not scanned yet whose method can still win; a
    # hopeful gain; the members of methods that cannot win last.
    gain = None
    if offline_best is not None and (inc is None or offline_best[0] > inc):
        gain = offline_best[1]
    first = explore[1] if explore is not None else None
    out = first or confident or gain or scan or hopeful or hopeless
    out = out or class_launch(space, rows, lay)
    if out is not None and skipped:
        out = replace(out, skipped=tuple(skipped))
    return out


def depth_predictions(
    space: SearchSpace, rows: Sequence[Any], lay: Layout
) -> list[tuple[dict[str, Any], Prediction]]:
    """(configuration, prediction at the objective point) of every unlaunched depth of
    every proposer launched at least once in the objective class: only launches of its
    running batch at the objective level are fitted (``Layout.same_batch``)."""
    level = (space.primary_workload, space.primary_concurrency)
    metric = space.objectives[0].metric
    launched = [
        r
        for r in rows
        if r.reused_from is None and r.state in MEASURED and lay.same_batch(r.params)
    ]
    cal = calibration(
        rows,
        metric,
        level,
        "depth",
        noise=own_noise(rows, metric, level, space.stop_launch_noise),
    )
    families = lay.families
    per_family: dict[str, tuple[list[DepthPoint], DepthPoint | None]] = {}
    for fk, members in families.items():
        if fk not in lay.started:
            continue
        target = members[0].get("target")
        pts, bases = [], []
        for r in launched:
            m = primary(r, level)
            if m is None:
                continue
            if r.params.get("method") == "none" and r.params.get("target") == target:
                bases.append((r, DepthPoint(r.number, 0, m)))
            elif family_key(r.params) == fk:
                pts.append(DepthPoint(r.number, int(r.params["num_speculative_tokens"]), m))
        per_family[fk] = (pts, baseline_for(bases, lay.place(members[0]), lay.concurrency))
    # What a proposer launched at two depths says of its method's fixed cost per step.
    shares: dict[str, list[float]] = {}
    for fk, (pts, base) in per_family.items():
        if (phi := fixed_share_of(pts, base)) is not None:
            shares.setdefault(families[fk][0]["method"], []).append(phi)
    out = []
    seen = set(lay.taken)  # members of one class (batch sizes, memory shares) place as one
    for fk, (pts, base) in per_family.items():
        share = shares.get(families[fk][0]["method"])
        phi = statistics.median(share) if share else None
        depths = {p.depth for p in pts}
        for c in families[fk]:
            k = int(c["num_speculative_tokens"])
            cand = lay.place(c)
            if k in depths or config_key(cand) in seen:
                continue
            seen.add(config_key(cand))
            pred = predict_depth(k, pts, base, metric, calibration=cal, fixed_share=phi)
            if pred is not None and metric in pred.metrics:
                out.append((cand, pred))
    return out


def predicted_points(
    space: SearchSpace,
    rows: Sequence[Any],
    memory_for: Callable[[dict[str, Any]], float],
    grid: Sequence[dict[str, Any]] | None = None,
) -> list[PredictedPoint]:
    """What the depth model predicts for every unlaunched depth of the launched proposers,
    at the objective point (for people to see, drawn apart from measurements)."""
    point = (space.primary_workload, space.primary_concurrency)
    lay = Layout.of(space, rows, memory_for, grid)
    return [PredictedPoint.of(c, p, point) for c, p in depth_predictions(space, rows, lay)]


def _depth_proposal(
    cand: dict[str, Any],
    pred: Prediction,
    metric: str,
    level: tuple[str, int],
    incumbent: float | None,
) -> Proposal:
    v = pred.metrics[metric]
    inc = "no feasible incumbent yet" if incumbent is None else f"incumbent {incumbent:.4g}"
    why = (
        f"predicted {metric} {v:.4g} (+/-{100 * pred.rel_sigma:.0f}%) at "
        f"{level[0]}@{level[1]}, the best unlaunched depth; {inc}"
    )
    return Proposal(cand, "guide: depth", why, PredictedPoint.of(cand, pred, level).note(metric))


def _next_scan(
    lay: Layout,
    tried: set[str],
    potential: dict[str, float],
    incumbent: float | None,
) -> tuple[Proposal | None, Proposal | None]:
    """(next scan, next scan of a method that cannot win) at the proposer's largest depth.

    One proposer of each method first (prior order: methods differ more than the members
    of one method do), then the members of the methods whose potential is best; a method
    whose potential stays below the incumbent (signed ``incumbent``) is scanned only after
    every hopeful exploit."""
    families = lay.families
    order = {m: i for i, m in enumerate(_PRIOR)}
    methods_tried = {json.loads(fk)["method"] for fk in tried}

    def rank(fk: str) -> tuple[int, float, int]:
        m = families[fk][0]["method"]
        if m not in methods_tried:
            return 0, 0.0, order.get(m, len(order))
        return 1, -potential.get(m, float("-inf")), order.get(m, len(order))

    scan = hopeless = None
    for fk in sorted((fk for fk in families if fk not in tried), key=rank):
        deepest = max(families[fk], key=lambda c: c["num_speculative_tokens"])
        cand = lay.place(deepest)
        if config_key(cand) in lay.taken:
            continue
        k = deepest["num_speculative_tokens"]
        method = deepest["method"]
        can_win = (
            method not in methods_tried
            or incumbent is None
            or potential.get(method, float("inf")) >= incumbent
        )
        why = (
            f"first launch of this proposer, at its largest depth k={k}: its per-position "
            "acceptance prices every depth up to it"
        )
        if can_win and scan is None:
            scan = Proposal(cand, "guide: scan", why)
        elif not can_win and hopeless is None:
            hopeless = Proposal(cand, "guide: scan", why + " (its method trails the best)")
        if scan is not None and hopeless is not None:
            break
    return scan, hopeless


def family_memory(
    space: SearchSpace, rows: Sequence[Any], need: int | None
) -> Callable[[dict[str, Any]], float]:
    """A proposer family's memory share for the guide's launches: the smallest share whose
    launched KV cache held the workload, else the largest share (most likely to hold)."""

    def pick(c: dict[str, Any]) -> float:
        if need is not None:
            fam = memory_family(c)
            held = [
                float(r.params["memory_fraction"])
                for r in rows
                if r.kv_cache_tokens is not None
                and r.kv_cache_tokens >= need
                and memory_family(r.params) == fam
            ]
            if held:
                return min(held)
        return space.memory_fraction[-1]

    return pick
