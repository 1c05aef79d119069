"""Every depth of a chain proposer from the depths already launched.

Why: for a chain proposer (draft model, EAGLE, EAGLE-3, MTP, n-gram lookup) the token drafted
at position i does not depend on how many follow it, so the per-position acceptance that
vLLM counts at depth K (P(position i accepted), cumulative) gives the expected tokens one
step commits at every k <= K exactly: tau(k) = 1 + sum_{i<=k} a_i. What depth changes
besides is the cost of a step, which grows with k. One launch per proposer therefore prices
all its depths once the step cost is known at two depths; the baseline (k = 0) is one.

Model, per (workload, concurrency) level:

- step time s_d = the mean inter-chunk latency at every launched depth d (one streamed chunk
  per step), or tau_d * mean TPOT_d without it;
- with two launched depths, s(k) = a + b*k by least squares over them; with one (K), the
  extra cost s_K - s_0 splits into a part per drafted token and a fixed part (the
  proposer's own overhead), both >= 0, so s(k) lies between the line through the baseline
  and s_K itself: the middle is predicted and the band reaches both ends;
- TPOT(k) = w + s(k) / tau(k), where w (the wait a token sees besides its own step: other
  requests' prefills) is the nearest launched depth's TPOT - s/tau, kept as is; metrics are
  scaled from that anchor;
  end-to-end = TTFT + decode time; throughput at a fixed concurrency scales as 1 / e2e;
  ITL (a step) as s(k); TTFT is the anchor's;
- with a queue (the anchor's ``mean_queue_ms`` q > 0: vLLM's request queue time, per
  window; ``max_num_seqs`` below the concurrency), see ``_scaled``: the queue wait scales
  with the service time, TTFT = (TTFT - q) + q * r_service.

Uncertainty: the anchor's own 95 % interval, plus the reach to both ends (one launched depth)
or 1 % per unit of depth away from the anchor (two), plus the median error of this job's
earlier predictions, less the noise of the launch each was measured on (``_layout.calibration``).
A prediction is never a measurement: it is stored beside the trial that launched it and
shown as predicted, with its error once measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DepthPoint",
    "Prediction",
    "fixed_share_of",
    "line_fit",
    "predict_depth",
    "predict_from_baseline",
    "round_cost",
    "step_ms",
    "tau",
]

Level = tuple[str, int]

_THROUGHPUT = ("output_tok_per_s", "requests_per_s", "goodput_req_per_s")
_TPOT = ("mean_tpot_ms", "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms")
_ITL = ("mean_itl_ms", "p50_itl_ms", "p90_itl_ms", "p99_itl_ms")
_E2E = ("mean_e2e_ms", "p50_e2e_ms", "p90_e2e_ms", "p99_e2e_ms")
_TTFT = ("mean_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms")
PREDICTED_METRICS = _THROUGHPUT + _TPOT + _ITL + _E2E + _TTFT


@dataclass(frozen=True)
class DepthPoint:
    """One launched depth of a proposer (or the baseline, depth 0) at one level."""

    trial: int
    depth: int
    metrics: dict[str, Any]

    @property
    def per_position(self) -> list[float]:
        return [float(x) for x in self.metrics.get("per_position_acceptance") or []]


@dataclass(frozen=True)
class Prediction:
    """Predicted metrics of one depth at one level; never a measurement."""

    depth: int
    metrics: dict[str, float]
    rel_sigma: float  # relative half-width of the ~95 % band of the first objective
    basis: tuple[int, ...]  # trial numbers the prediction rests on
    anchor: int  # the launched depth it is scaled from
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Of ``rel_sigma``, the part that is not noise but an unknown: how far the good end of a
    # bracket (a step's cost split between fixed and per-token, from one launched depth)
    # lies from the middle. The truth sits anywhere in a bracket, so what it may gain is
    # priced at its good end, with only the noise around it (``tuner.search._stop``).
    bracket: float = 0.0


def tau(per_position: Sequence[float], k: int) -> float:
    """Expected tokens one step commits at depth k: the bonus token plus each accepted one."""
    return 1.0 + float(sum(per_position[:k]))


def _tau_of(p: DepthPoint) -> float:
    if p.depth == 0:
        return 1.0
    mal = p.metrics.get("mean_acceptance_length")
    return float(mal) if mal else tau(p.per_position, p.depth)


def step_ms(p: DepthPoint) -> float | None:
    """A decode step: a round's share of the request's time after prefill where the engine
    says what its rounds hold (``round_cost``: the client's chunks can arrive in bursts),
    else the mean gap between streamed chunks (one chunk per step carries every token the
    step committed), else tau * TPOT."""
    if (rc := round_cost(p)) is not None:
        return rc.ms
    itl = p.metrics.get("mean_itl_ms")
    if itl and itl > 0:
        return float(itl)
    tpot = p.metrics.get("mean_tpot_ms")
    return _tau_of(p) * float(tpot) if tpot and tpot > 0 else None


def _fixed_ms(m: dict[str, Any]) -> float | None:
    """The part of a request's time speculation does not shorten: its queue wait and prefill
    by the engine's own clock (None where the engine does not say). Never above the TTFT the
    client saw; below it when the first chunk arrived late (a front end starved of CPU sends
    a request's tokens in one burst: that TTFT holds decode time)."""
    pre, ttft = m.get("mean_prefill_ms"), m.get("mean_ttft_ms")
    if pre is None or ttft is None:
        return None
    return min(float(ttft), max(0.0, float(m.get("mean_queue_ms") or 0.0)) + float(pre))


@dataclass(frozen=True)
class RoundCost:
    """One launch's decode rounds, per request: what a round costs (ms of the request's time
    after its prefill, the front end's share included) and what it drafts."""

    ms: float
    drafted: float  # drafted tokens a round (0 for the baseline)
    share: float  # share of rounds that drafted (0 for the baseline)


def round_cost(p: DepthPoint) -> RoundCost | None:
    """The launch's rounds from its engine's prefill time and speculation counters: a request
    commits n tokens in 1 + (n - 1 - accepted) rounds (the prefill's token, then each round
    one token plus what it accepted). None where the engine does not say."""
    m = p.metrics
    fixed, e2e = _fixed_ms(m), m.get("mean_e2e_ms")
    ok, out, runs = m.get("num_ok"), m.get("output_tokens"), int(m.get("repeats") or 1)
    if fixed is None or not e2e or not ok or not out:
        return None
    n = float(out) / float(ok)  # summed over repeats, as the counters are not (one run's)
    per_req = float(ok) / runs
    acc = float(m.get("num_accepted_tokens") or 0.0) / per_req if p.depth else 0.0
    rounds = n - 1.0 - acc
    if rounds < 1.0 or (p.depth and m.get("num_draft_tokens") is None):
        return None
    drafted = float(m.get("num_draft_tokens") or 0.0) / per_req / rounds
    share = min(1.0, float(m.get("num_drafts") or 0.0) / per_req / rounds)
    return RoundCost((float(e2e) - fixed) / rounds, drafted, share)


def line_fit(
    points: Sequence[tuple[float, float]], floor: float | None = None
) -> tuple[float, float] | None:
    """Least squares y = a + b*x, b >= 0 and a >= ``floor`` (a step never costs less for
    drafting more, nor below the baseline's); None with under two distinct x. A free line
    breaking a bound gives way to the best line held at it, not to one clipped coefficient
    (a real job's noisy suffix depths gave -1.1 + 0.58 x; 0.58 x priced them at half)."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / var
    a = my - b * mx
    if b >= 0 and (floor is None or a >= floor):
        return a, b
    fits = [(my if floor is None else max(my, floor), 0.0)]  # flat
    if floor is not None:  # through (0, floor)
        sxx = sum(x * x for x, _ in points)
        fits.append((floor, max(0.0, sum(x * (y - floor) for x, y in points) / sxx)))
    return min(fits, key=lambda f: sum((y - f[0] - f[1] * x) ** 2 for x, y in points))


def _rel_ci(m: dict[str, Any], metric: str) -> float:
    st = (m.get("stats") or {}).get(metric) or {}
    v, lo, hi = m.get(metric), st.get("ci95_low"), st.get("ci95_high")
    if not v or lo is None or hi is None or int(st.get("n") or 1) < 2:
        return 0.05  # one run: no interval of its own, assume the usual CPU spread
    return abs(hi - lo) / 2.0 / abs(float(v))


# Measured errors of one model before its own error scale replaces its a-priori band.
_EMPIRICAL = 3


@dataclass(frozen=True)
class Calibration:
    """What this job measured of one prediction model's errors: the median relative error
    of its earlier predictions against their launches, and how many there were."""

    median: float = 0.0
    n: int = 0
    # The median log ratio measured / predicted, shrunk toward 0 (``_layout._shrink``): a model's
    # steady bias (an n-gram's verify cost grows with how often it drafts, which the step-cost
    # model does not see) corrected, not only widened into its band.
    bias: float = 0.0

    def correct(self, value: float) -> float:
        """``value`` with the measured bias taken out."""
        return value * math.exp(self.bias)

    def band(self, model: float) -> float:
        """A new prediction's band, given the model's own (a priori) ``model`` band. With
        at least ``_EMPIRICAL`` measured errors the band is their scale (median / 0.6745: a
        normal error's sigma), never below half the model's: the a-priori band and the
        measured error describe the same error, so adding them would count it twice.
        Before that, the model's band widened by the median error seen."""
        if self.n >= _EMPIRICAL:
            return max(model / 2.0, self.median / 0.6745)
        return model + self.median


def _banded(model: float, cal: Calibration | float) -> float:
    return cal.band(model) if isinstance(cal, Calibration) else model + cal


def predict_depth(
    k: int,
    launched: Sequence[DepthPoint],
    baseline: DepthPoint | None,
    objective: str,
    *,
    calibration: Calibration | float = 0.0,
    fixed_share: float | None = None,
) -> Prediction | None:
    """The metrics of depth ``k`` at one level from the launched depths of the same
    proposer there (and the baseline); None when they cannot say (no per-position
    acceptance reaching k, or no step cost at two depths). ``fixed_share``: the share of
    a step's extra cost that does not grow with depth, as measured on another proposer of
    the same method in this job (``fixed_share_of``); without it the share is bracketed."""
    spec = [p for p in launched if p.depth > 0 and step_ms(p) is not None]
    deep = [p for p in spec if len(p.per_position) >= k]
    if k < 1 or not deep:
        return None
    acc = max(deep, key=lambda p: (p.depth, p.trial))
    anchor = min(spec, key=lambda p: (abs(p.depth - k), -p.trial))
    s_a = step_ms(anchor) or 0.0
    pts = [(p.depth, s) for p in spec if (s := step_ms(p)) is not None]
    bracket = 0.0
    s0 = step_ms(baseline) if baseline is not None else None
    if len({d for d, _ in pts}) >= 2:
        fit = line_fit(pts, s0)
        if fit is None or s_a <= 0:
            return None
        # Held at or above the baseline's step (``line_fit``'s floor): a line through close,
        # noisy depths fell below it away from them, and a step that drafts never costs less.
        s_k = fit[0] + fit[1] * k
        s_a = fit[0] + fit[1] * anchor.depth
        out = _scaled(anchor, acc.per_position, k, s_k, s_a)
        spread = 0.01 * abs(k - anchor.depth)
        how = "linear in k, least squares over the launched depths"
    elif s0 is not None and s_a > 0:
        # One launched depth K: the extra cost of a step, s_K - s_0, splits into a part per
        # drafted token and a fixed part (proposer, rejection sampler). Both are >= 0, so
        # s(k) lies between the all-per-token line through the baseline and the all-fixed
        # s_K: predict the middle, with a band reaching both ends.
        d, extra = anchor.depth, s_a - s0
        if fixed_share is not None:
            phi = min(1.0, max(0.0, fixed_share))
            out = _scaled(anchor, acc.per_position, k, s0 + extra * (phi + (1 - phi) * k / d), s_a)
            spread = 0.02 * abs(k - d)
            how = f"with {phi:.0%} of its extra cost fixed, as another proposer of the method"
        else:
            lo = _scaled(anchor, acc.per_position, k, s0 + extra * k / d, s_a)
            hi = _scaled(anchor, acc.per_position, k, s_a, s_a)
            out = _scaled(anchor, acc.per_position, k, (s0 + extra * k / d + s_a) / 2.0, s_a)
            if objective not in out or objective not in lo or objective not in hi:
                return None
            v = out[objective]
            spread = max(abs(lo[objective] - v), abs(hi[objective] - v)) / abs(v)
            bracket = spread
            how = "between all per drafted token and all fixed: the middle"
    else:
        return None
    if not out:
        return None
    sigma = _banded(_rel_ci(anchor.metrics, objective) + spread, calibration)
    bracket = min(bracket, sigma)
    basis = sorted({p.trial for p in spec} | ({baseline.trial} if baseline else set()))
    notes = (
        f"tau from the per-position acceptance of trial {acc.trial} (k={acc.depth})",
        f"step cost {how}",
        f"scaled from trial {anchor.trial} (k={anchor.depth})",
    )
    return Prediction(k, out, sigma, tuple(basis), anchor.trial, notes, bracket)


def fixed_share_of(launched: Sequence[DepthPoint], baseline: DepthPoint | None) -> float | None:
    """The share of a step's extra cost (over the baseline's) that does not grow with depth,
    from a proposer launched at two depths or more; None when it cannot be told."""
    pts = [(p.depth, s) for p in launched if p.depth > 0 and (s := step_ms(p)) is not None]
    s0 = step_ms(baseline) if baseline is not None else None
    fit = line_fit(pts, s0)
    if fit is None or s0 is None:
        return None
    a, b = fit
    deepest = max(d for d, _ in pts)
    extra = a + b * deepest - s0
    return None if extra <= 0 else min(1.0, max(0.0, (a - s0) / extra))


def _scaled(
    anchor: DepthPoint, acc: Sequence[float], k: int, s_k: float, s_a: float
) -> dict[str, float]:
    """The anchor's metrics moved to depth k with step time s_k (the anchor's: s_a).

    Without a queue: TPOT scales by r_tpot; end-to-end = TTFT + decode, with TTFT kept, so
    r_e2e = (TTFT + (e2e - TTFT) * r_tpot) / e2e; throughput / r_e2e. TTFT in r_e2e is the
    engine's queue wait plus prefill where it says (``_fixed_ms``): a first chunk that came
    late held decode time, which speculation shortens.

    With a queue wait q (mean, ms) in the anchor's TTFT, a request's time is q plus its
    service S = e2e - q (prefill TTFT - q, then decode). In a closed loop of C clients on B
    slots (B = max_num_seqs < C), a slot frees every S / B on average and C - B requests
    wait ahead, so q = (C/B - 1) * S: the wait is a fixed multiple of the service time, and
    a faster step shortens the service of the requests ahead too. So, with
    r_service = ((TTFT - q) + (e2e - TTFT) * r_tpot) / (e2e - q):

      TTFT' = (TTFT - q) + q * r_service    (prefill kept, queue scaled)
      e2e'  = (e2e - q) * r_service + q * r_service = e2e * r_service
      throughput' = throughput / r_service  (Little's law: C / e2e at fixed C)

    Percentiles of TTFT move by the mean's shift q * (r_service - 1) (the queue wait's own
    distribution is not measured); those of end-to-end scale by r_service. With q = 0 this
    is the formula without a queue.
    """
    if s_k <= 0 or s_a <= 0:
        return {}
    tau_k, tau_a = tau(acc, k), tau(acc, anchor.depth)
    m = anchor.metrics
    tpot_a = float(m.get("mean_tpot_ms") or s_a / tau_a)
    # What a token waits besides its own step (other requests' prefills) does not scale.
    other = max(0.0, tpot_a - (step_ms(anchor) or s_a) / _tau_of(anchor))
    r_tpot = (other + s_k / tau_k) / (other + s_a / tau_a)
    ttft, e2e = m.get("mean_ttft_ms"), m.get("mean_e2e_ms")
    r_e2e, ttft_shift = r_tpot, 0.0
    if (fixed := _fixed_ms(m)) is not None:
        ttft = fixed  # what the request spent before decoding, by the engine's clock
    if ttft is not None and e2e and e2e > ttft:
        q = min(max(0.0, float(m.get("mean_queue_ms") or 0.0)), float(ttft))
        r_e2e = ((ttft - q) + (e2e - ttft) * r_tpot) / (e2e - q)
        ttft_shift = q * (r_e2e - 1.0)
    out: dict[str, float] = {}
    for name in PREDICTED_METRICS:
        v = m.get(name)
        if v is None:
            continue
        if name in _THROUGHPUT:
            out[name] = float(v) / r_e2e
        elif name in _TPOT:
            out[name] = float(v) * r_tpot
        elif name in _ITL:
            out[name] = float(v) * s_k / s_a
        elif name in _E2E:
            out[name] = float(v) * r_e2e
        else:
            out[name] = max(0.0, float(v) + ttft_shift)
    if m.get("mean_queue_ms") is not None:
        out["mean_queue_ms"] = max(0.0, float(m["mean_queue_ms"])) * r_e2e
    out["mean_acceptance_length"] = tau_k
    out["acceptance_rate"] = (tau_k - 1.0) / k
    return out


def predict_from_baseline(
    k: int,
    per_position: Sequence[float],
    baseline: DepthPoint,
    objective: str,
    fixed: float,
    per_token: float,
    rel_sigma: float,
) -> Prediction | None:
    """Depth ``k`` of a proposer not launched yet: the baseline's metrics moved by an
    offline acceptance (``per_position``) and a step cost s(k) = s0 * (1 + fixed +
    per_token * k); None without a baseline step or positions reaching k. ``baseline``
    must have run the proposer's batch (``baseline_for``): its queue wait, if any, is
    scaled as ``_scaled`` says."""
    rc = round_cost(baseline)
    s0 = rc.ms if rc is not None else step_ms(baseline)
    if s0 is None or k < 1 or len(per_position) < k:
        return None
    out = _scaled(baseline, per_position, k, s0 * (1.0 + fixed + per_token * k), s0)
    if objective not in out:
        return None
    sigma = _rel_ci(baseline.metrics, objective) + rel_sigma
    notes = (
        "tau from offline acceptance on the baseline's greedy outputs",
        f"scaled from baseline trial {baseline.trial}",
    )
    return Prediction(k, out, sigma, (baseline.trial,), baseline.trial, notes)
