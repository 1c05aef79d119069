"""What a step of a proposer not launched yet costs, from what this job launched.

A step costs s(k) = s0 * (1 + f + c*k): f and c are learned from this job's launches of the
same method (least squares over its launched depths; one depth splits its extra cost evenly),
else from any launched method for c's verify part (the lowest, an n-gram lookup's being the
verify cost alone) plus, for a model, its own share: its size relative to the target's, scaled
by what launched model proposers cost over their size (a small model's per-forward overhead);
for a lookup, that borrowed cost split evenly at the depth it was measured at (a lookup costs
by the round, and the borrowed per-token cost holds the other launch's fixed part); else a
prior (c = 0.05 per drafted token plus the size share, f = 0), with a band that says so.

Rounds, where the engine says what they hold (``_depth.round_cost``: its prefill time and
speculation counters): a step is a decode round's share of a request's time after its
prefill, and k is what a round drafts on average, so f is per drafting round and c per token
drafted. A proposer that drafts only when it finds a match (n-gram, suffix trees) is charged
for the tokens it drafts, not for its cap.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.hub import local_view
from tuner.methods import METHODS
from tuner.search._depth import DepthPoint, line_fit, round_cost, step_ms
from tuner.search._layout import family_key
from tuner.space import SearchSpace

__all__ = ["StepCost", "proposer_share", "step_costs"]

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
    # so the band grows from ``_SAME_DEPTH_SIGMA`` with the distance from it, by what the
    # split can move the step there (``half``: half the extra cost measured at the anchor,
    # relative to the baseline's step), never beyond ``rel_sigma``.
    anchor: int | None = None
    half: float | None = None
    # A line fitted over launched depths (lowest, highest): between them it interpolates
    # measured steps, so its band is ``near`` (the fit's residual scale, at least
    # ``_SAME_DEPTH_SIGMA``), growing to ``rel_sigma`` outside them.
    span: tuple[int, int] | None = None
    near: float = _SAME_DEPTH_SIGMA

    def band(self, k: int) -> float:
        """The relative band of a prediction at depth ``k``."""
        if self.span is not None:
            lo, hi = self.span
            edge = lo if k < lo else hi
            far = 0.0 if lo <= k <= hi else min(1.0, abs(k - edge) / max(1, edge))
            return self.near + max(0.0, self.rel_sigma - self.near) * far
        if self.anchor is None or self.anchor < 1:
            return self.rel_sigma
        r = k / self.anchor
        if self.half is not None:
            # All fixed: s0 (1 + 2h); all per drafted token: s0 (1 + 2h r); the middle
            # between them is predicted, so the step is off by at most h |r - 1| of it.
            mid = 1.0 + self.half * (1.0 + r)
            return min(self.rel_sigma, _SAME_DEPTH_SIGMA + self.half * abs(r - 1.0) / mid)
        far = min(1.0, abs(r - 1.0))
        return _SAME_DEPTH_SIGMA + (self.rel_sigma - _SAME_DEPTH_SIGMA) * far


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
    on every proposal); for Medusa heads, one head's, since each drafts one token."""
    view = local_view(model)
    if view is None:
        raise OSError(f"{model} is not on this machine")
    cfg = json.loads((view / "config.json").read_text())
    h, n = cfg["hidden_size"], cfg.get("num_hidden_layers", 1)
    if cfg.get("model_type") == "medusa":  # a drafted token costs one head: blocks, lm_head
        return n * h * h + cfg.get("vocab_size", 0) * h
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
    rb = round_cost(baseline) if baseline is not None else None
    s0 = rb.ms if rb is not None else (step_ms(baseline) if baseline is not None else None)
    # (depth, extra cost e = s / s0 - 1, drafted tokens x, drafting share h) per launch
    extra: dict[str, list[tuple[int, float, float, float]]] = {}
    # (verify cost a drafted token, drafted tokens, drafting share) of each launch
    verify: list[tuple[float, float, float]] = []
    models: list[tuple[dict[str, Any], float]] = []  # (a launched model proposer, e / x)
    for p, pt in launched if s0 else ():
        got = _launch_cost(pt, rb is not None)
        if got is None or pt.depth < 1:
            continue
        s, x, h = got
        e = s / s0 - 1.0
        extra.setdefault(p["method"], []).append((pt.depth, e, x, h))
        verify.append((max(0.0, e / x - proposer_share(space, p, sizes)), x, h))
        if not METHODS[p["method"]].model_free:
            models.append((p, e / x))
    own = extra.get(c["method"], [])
    if len({d for d, *_ in own}) >= 2:
        n = len(own)
        xe = [(x, e) for _, e, x, _h in own]
        # Two depths drafting alike cannot tell the parts apart: their mean cost, all fixed.
        a, b = line_fit(xe, 0.0) or (max(0.0, statistics.fmean(e for _, e in xe)), 0.0)
        # Residuals relative to the step they price: how far the line misses its own launches.
        res = [abs(e - a - b * x) / (1.0 + max(0.0, e)) for _, e, x, _h in own]
        near = max(_SAME_DEPTH_SIGMA, math.sqrt(sum(r * r for r in res) / n))
        depths = [d for d, *_ in own]
        span = (min(depths), max(depths))
        return StepCost(a, b, 0.1, "learned from its method's depths", span=span, near=near)
    if own:
        d, e, x, h = max(own)
        e = max(0.0, e)
        how = f"its method's one launched depth ({d}), split"
        return StepCost(*_even_split(e, x, h), 0.25, how, anchor=d, half=e / 2)
    v, at, at_share = min(verify) if verify else (_VERIFY_PER_TOKEN, 1.0, 1.0)
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
    if verify and METHODS[c["method"]].model_free:
        # A lookup's own cost is its rounds' (the lookup, the round's bookkeeping), not its
        # tokens': the borrowed cost, per token only an upper bound (that launch's fixed part
        # is in it), is split as one launched depth's is, at the depth it was measured at.
        how = "verify cost from other methods' launches, split"
        return StepCost(*_even_split(v * at, at, at_share), _VERIFY_SIGMA, how)
    if verify:
        return StepCost(0.0, v + share, _VERIFY_SIGMA, "verify cost from other methods' launches")
    return StepCost(0.0, v + share, _PRIOR_SIGMA, "prior")


def _even_split(e: float, x: float, h: float) -> tuple[float, float]:
    """(fixed, per drafted token) that put half of one launch's extra step cost ``e`` on its
    drafting rounds (share ``h`` of its steps) and half on its ``x`` drafted tokens: one
    launch cannot tell the two apart, and the middle is off by the least either way."""
    return e / (2 * h), e / (2 * x)


def _launch_cost(pt: DepthPoint, rounds: bool) -> tuple[float, float, float] | None:
    """(step ms, drafted tokens a step, drafting share) of a launch: its rounds where the
    baseline's are known too (one scale for both), else its step and its depth."""
    if not rounds:
        s = step_ms(pt)
        return None if s is None else (s, float(pt.depth), 1.0)
    rc = round_cost(pt)
    if rc is None or rc.drafted <= 0 or rc.share <= 0:
        return None
    return rc.ms, rc.drafted, rc.share


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
