"""One window against job N's model: predictions for every depth the server can price, and
the verdict.

Predictions: depth k (1..the server's k: deeper positions are never drafted, so nothing
prices them) from the live per-position acceptance and the job's step cost at the measured
concurrency nearest the live one (``predict_from_baseline``); depth 0 is the job's measured
baseline there. Band: the prediction's own (baseline interval plus the step-cost model's),
plus the live acceptance's sampling error, plus -- said in the notes -- how far the live
acceptance lies outside what the job measured, and 10 % when the live concurrency lies
above the job's highest level.

Verdict, on the job's first objective: depths compared under one cost model share its
error, so an option must lead by ``max(5 %, the live acceptance's own error)``: best is no
speculation by that margin -> "turn speculation off"; another depth by that margin -> "switch
to k=..."; the server's depth at least as good as none -> "still pays"; otherwise the two are
within the margin -> "cannot tell yet". Too few drafts (``MIN_DRAFTS``), a restart, or a server
that drafts nothing -> "cannot tell yet" with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tuner.engines import ServedModel, ServerSnapshot
from tuner.search import DepthPoint, predict_from_baseline, tau
from tuner.watch._compare import compare_server
from tuner.watch._model import LevelModel, WatchedJob
from tuner.watch._result import (
    CANNOT_TELL,
    STILL_PAYS,
    SWITCH,
    TURN_OFF,
    VERDICT_CODES,
    DepthPrediction,
    JobAcceptance,
    WatchResult,
)
from tuner.watch._window import MIN_DRAFTS, Window

__all__ = ["LEAD", "assess"]

LEAD = 0.05  # the least lead an option needs over the server's depth to be recommended


def _ci(metrics: dict[str, Any], metric: str) -> float:
    st = (metrics.get("stats") or {}).get(metric) or {}
    v, lo, hi = metrics.get(metric), st.get("ci95_low"), st.get("ci95_high")
    if not v or lo is None or hi is None or int(st.get("n") or 1) < 2:
        return 0.05
    return abs(hi - lo) / 2.0 / abs(float(v))


def _acc_error(pp: Sequence[float], k: int, n: int) -> float:
    """Relative 95 % error of tau(k) from ``n`` drafts (positions taken as fully correlated,
    the wider case)."""
    if n <= 0:
        return 1.0
    sd = sum(math.sqrt(max(0.0, p * (1 - p)) / n) for p in pp[:k])
    return 1.96 * sd / tau(pp, k)


def _band(v: float | None, rel: float, lo: bool) -> float | None:
    return None if v is None else v * (1 - rel if lo else 1 + rel)


def _pred(depth: int, m: dict[str, Any], band: float, tau_k: float, src: str, notes: list[str]):
    return DepthPrediction(
        depth=depth,
        source=src,
        output_tok_per_s=m.get("output_tok_per_s"),
        output_tok_per_s_low=_band(m.get("output_tok_per_s"), band, True),
        output_tok_per_s_high=_band(m.get("output_tok_per_s"), band, False),
        mean_tpot_ms=m.get("mean_tpot_ms"),
        mean_tpot_ms_low=_band(m.get("mean_tpot_ms"), band, True),
        mean_tpot_ms_high=_band(m.get("mean_tpot_ms"), band, False),
        p99_tpot_ms=m.get("p99_tpot_ms"),
        mean_acceptance_length=tau_k,
        band_rel=band,
        speedup_vs_no_spec=None,
        notes=notes,
    )


def _predictions(
    model: WatchedJob, lv: LevelModel, pp: list[float], n: int, k_max: int, extra: float
) -> tuple[list[DepthPrediction], list[float]]:
    """(predictions for depths 0..k_max, the live acceptance's sampling error of each: what
    is not shared between depths priced by one model)."""
    src = f"predicted by job {model.job_id}'s model at its measured concurrency {lv.concurrency}"
    base: DepthPoint = lv.baseline
    b0 = _ci(base.metrics, model.objective) + extra
    out = [
        _pred(
            0,
            base.metrics,
            b0,
            1.0,
            f"job {model.job_id}'s baseline (trial {base.trial}) measured at concurrency "
            f"{lv.concurrency}, predicted to hold",
            [],
        )
    ]
    own = [0.0]
    for k in range(1, k_max + 1):
        if lv.cost is None:
            break
        c = lv.cost
        p = predict_from_baseline(k, pp, base, model.objective, c.fixed, c.per_token, c.rel_sigma)
        if p is None:
            continue
        t = tau(pp, k)
        sampling = acc = _acc_error(pp, k, n)
        notes = [f"step cost: {c.how} (fixed {c.fixed:.2f}, {c.per_token:.3f} a token)"]
        rng = model.tau_range(k)
        if rng is None:
            acc += 0.25
            notes.append(f"job {model.job_id} never measured depth {k}: band widened by 25%")
        elif not rng[0] - 1e-9 <= t <= rng[1] + 1e-9:
            edge = rng[0] if t < rng[0] else rng[1]
            wide = abs(t - edge) / edge
            acc += wide
            notes.append(
                f"live acceptance length {t:.2f} is outside what job {model.job_id} measured "
                f"at k={k} ({rng[0]:.2f}-{rng[1]:.2f}): band widened by {wide:.0%}"
            )
        out.append(_pred(k, p.metrics, p.rel_sigma + acc + extra, t, src, notes))
        own.append(sampling)
    v0 = out[0].model_dump().get(model.objective)
    fixed = []
    for d in out:
        v = d.model_dump().get(model.objective)
        s = None
        if v and v0:
            s = v / v0 if model.maximize else v0 / v
        fixed.append(d.model_copy(update={"speedup_vs_no_spec": s}))
    return fixed, own


def _verdict(
    preds: list[DepthPrediction], own: list[float], depth: int
) -> tuple[str, str, int | None]:
    """(verdict, reason, recommended depth) from the predictions' speedups."""
    s = {p.depth: p.speedup_vs_no_spec for p in preds if p.speedup_vs_no_spec is not None}
    if depth not in s:
        return CANNOT_TELL, f"job's model cannot price the server's depth k={depth}", None
    best = max(s, key=lambda k: (s[k], -k))
    margin = max(LEAD, own[depth] if depth < len(own) else LEAD)
    lead = s[best] / s[depth] - 1.0
    if best == 0 and lead > margin:
        return TURN_OFF, f"no speculation predicted {lead:.0%} better than k={depth}", 0
    if best != depth and lead > margin:
        return SWITCH + str(best), f"k={best} predicted {lead:.0%} better than k={depth}", best
    if s[depth] >= 1.0:
        return STILL_PAYS, f"k={depth} predicted {s[depth]:.2f}x no speculation", best
    return (
        CANNOT_TELL,
        f"k={depth} and no speculation predicted within {margin:.0%} of each other",
        best,
    )


def assess(
    model: WatchedJob,
    url: str,
    window: Window,
    last: ServerSnapshot,
    served: Sequence[ServedModel] | None,
    served_error: str | None = None,
) -> WatchResult:
    """The window's answer (pure: the scrapes are already made)."""
    diffs, not_compared = compare_server(model, last, served, served_error)
    lv = model.level(window.live_concurrency)
    notes: list[str] = []
    spec = window.spec
    n = spec.num_drafts if spec else 0
    pp = list(spec.per_position_acceptance) if spec else []
    extra = 0.0
    lo, hi = min(model.levels), max(model.levels)
    live = window.live_concurrency
    # Below one running request the server is idle part of the time: that is the lowest
    # level's regime, not an extrapolation. Above the highest level (or below a lowest one
    # over 1) it is.
    if live is not None and (live > hi or (live < lo and lo > 1)):
        extra = 0.10
        notes.append(
            f"live concurrency {live:.2f} is outside the levels job {model.job_id} measured "
            f"({lo}-{hi}): predicted at {lv.concurrency}, band widened by 10%"
        )
    preds, own = _predictions(model, lv, pp, n, window.depth if spec else 0, extra)
    if window.reset is not None:
        verdict, reason, best = CANNOT_TELL, window.reset, None
    elif spec is None or window.depth == 0:
        verdict, reason, best = CANNOT_TELL, "the server drafts nothing: speculation is off", None
    elif n < MIN_DRAFTS:
        verdict, reason, best = (
            CANNOT_TELL,
            f"too few drafts in the window: {n} < {MIN_DRAFTS}",
            None,
        )
    else:
        verdict, reason, best = _verdict(preds, own, window.depth)
    ok = window.reset is None and spec is not None and n >= MIN_DRAFTS
    mine = {p.depth: p for p in preds}
    got = model.measured_at(lv.concurrency)
    job_acc = None
    if got is not None:
        job_acc = JobAcceptance(
            trial=got[0],
            concurrency=lv.concurrency,
            per_position_acceptance=list(got[1]),
            mean_acceptance_length=tau(got[1], min(len(got[1]), max(1, window.depth))),
        )
    code = VERDICT_CODES[SWITCH if verdict.startswith(SWITCH) else verdict]
    return WatchResult(
        job_id=model.job_id,
        url=url,
        window_s=window.seconds,
        verdict=verdict,
        verdict_code=code,
        reason=reason,
        recommended_depth=best,
        server_depth=window.depth,
        num_drafts=spec.num_drafts if spec else None,
        num_draft_tokens=spec.num_draft_tokens if spec else None,
        num_accepted_tokens=spec.num_accepted_tokens if spec else None,
        acceptance_rate=spec.acceptance_rate if spec else None,
        per_position_acceptance=pp,
        mean_acceptance_length=spec.mean_acceptance_length if spec else None,
        live_concurrency=window.live_concurrency,
        live_waiting=window.live_waiting,
        model_concurrency=lv.concurrency,
        job_acceptance=job_acc,
        predictions=preds if ok else preds[:1],
        predicted_speedup=(
            mine[window.depth].speedup_vs_no_spec if ok and window.depth in mine else None
        ),
        objective=model.objective,
        config_differences=diffs,
        not_compared=not_compared,
        notes=notes,
        min_drafts=MIN_DRAFTS,
    )
