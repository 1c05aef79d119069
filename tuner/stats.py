"""Noise handling for repeated measurements: median, MAD, a 95 % interval, a robust score.

Why: one run of a CPU or GPU benchmark moves by several percent from run to run; ranking
candidates on single runs picks noise. Following vLLM's ``tune_speculative_k``, a point is
scored as median minus a MAD penalty (in the unfavourable direction), and a point whose
relative MAD is too high is measured again before it is trusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuner.metrics import Measurement

__all__ = [
    "MAD_SCALE",
    "STAT_METRICS",
    "aggregate",
    "expected_gain",
    "noise_score",
    "relative_mad",
    "relaunch_interval",
    "summary",
    "t975",
]

MAD_SCALE = 1.4826  # MAD -> standard deviation for normal noise

# Metrics kept with their spread across repeats (units in the names).
STAT_METRICS = (
    "output_tok_per_s",
    "requests_per_s",
    "goodput_req_per_s",
    "mean_ttft_ms",
    "p50_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p50_tpot_ms",
    "p90_tpot_ms",
    "p99_tpot_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "mean_e2e_ms",
    "p50_e2e_ms",
    "p90_e2e_ms",
    "p99_e2e_ms",
    "mean_queue_ms",
    "mean_prefill_ms",
    "acceptance_rate",
    "mean_acceptance_length",
)

# What each raw run keeps under ``runs``.
_RUN_KEYS = (
    "output_tok_per_s",
    "p99_tpot_ms",
    "p99_ttft_ms",
    "acceptance_rate",
    "num_failed",
    "duration_s",
)

# Two-sided 95 % Student t quantiles by degrees of freedom (1..30); beyond: normal.
_T975 = [
    float(x)
    for x in """
    12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228
    2.201  2.179 2.160 2.145 2.131 2.120 2.110 2.101 2.093 2.086
    2.080  2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042
    """.split()
]


def t975(df: int) -> float:
    if df < 1:
        return math.inf
    return _T975[df - 1] if df <= len(_T975) else 1.96


def expected_gain(log_ratio: float, log_sd: float, margin: float = 0.0) -> float:
    """Expected improvement beyond ``margin`` (a share) of a value whose log ratio to the
    incumbent is normal(``log_ratio``, ``log_sd``): E[max(0, X - log(1 + margin))], about the
    expected relative gain a launch would find. Jones, Schonlau and Welch (1998) stop a search
    once no candidate's expected improvement reaches 1 % of the incumbent."""
    mu = log_ratio - math.log1p(margin)
    if log_sd <= 0:
        return max(0.0, mu)
    z = mu / log_sd
    pdf = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * math.erfc(-z / math.sqrt(2))
    return log_sd * pdf + mu * cdf


def summary(values: Sequence[float], *, floor: float | None = 0.0) -> dict[str, float]:
    """Median, MAD, and a 95 % t-interval of the mean (over repeats, so n is small), clipped
    at ``floor`` (latencies and rates cannot go below zero)."""
    a = np.asarray([v for v in values if v is not None], dtype=float)
    if a.size == 0:
        raise ValueError("no values")
    med = float(np.median(a))
    mad = float(np.median(np.abs(a - med)))
    n = int(a.size)
    if n > 1:
        half = t975(n - 1) * float(a.std(ddof=1)) / math.sqrt(n)
        lo, hi = float(a.mean()) - half, float(a.mean()) + half
    else:
        lo = hi = med
    if floor is not None:
        lo = max(lo, floor)
    return {"median": med, "mad": mad, "ci95_low": lo, "ci95_high": hi, "n": n}


def relaunch_interval(values: Sequence[float]) -> tuple[float, float]:
    """95 % prediction interval for what one more launch of a configuration gives, from the
    values (one per launch, e.g. each launch's median) of earlier launches.

    Why not the within-launch interval: one launch's repeats share its memory layout, thread
    placement and warm caches, so they agree far better than two launches do (issue 21: a
    re-launch moved throughput by up to 46 %). Computed on the log scale (launch-to-launch
    changes are multiplicative): ``mean ± t(0.975, n−1)·s·sqrt(1 + 1/n)`` over the n log
    values, ``s`` their standard deviation; returned in the values' own units. Needs n ≥ 2
    positive values (ValueError otherwise)."""
    a = np.asarray(values, dtype=float)
    if a.size < 2:
        raise ValueError("a relaunch interval needs at least 2 launches")
    if np.any(a <= 0):
        raise ValueError("a relaunch interval needs positive values (it is taken on logs)")
    logs = np.log(a)
    n = int(a.size)
    half = t975(n - 1) * float(logs.std(ddof=1)) * math.sqrt(1 + 1 / n)
    mean = float(logs.mean())
    return math.exp(mean - half), math.exp(mean + half)


def relative_mad(stats: dict[str, float]) -> float:
    med = stats["median"]
    return 0.0 if med == 0 else MAD_SCALE * stats["mad"] / abs(med)


def noise_score(stats: dict[str, float], direction: str, penalty: float = 1.0) -> float:
    """Median moved against us by ``penalty`` robust standard deviations."""
    spread = penalty * MAD_SCALE * stats["mad"]
    return stats["median"] - spread if direction == "maximize" else stats["median"] + spread


def aggregate(repeats: Sequence[Measurement], *, remeasured: int = 0) -> dict[str, Any]:
    """One stored point from N repeats: medians at top level (so every reader sees the
    robust value under the usual name), spread under ``stats``, raw runs under ``repeats``."""
    if not repeats:
        raise ValueError("no repeats")
    runs = [m.model_dump(mode="json") for m in repeats]
    out: dict[str, Any] = dict(runs[len(runs) // 2])  # structure and non-numeric fields
    stats: dict[str, dict[str, float]] = {}
    for name in STAT_METRICS:
        vals = [r.get(name) for r in runs]
        if any(v is None for v in vals):
            continue
        stats[name] = summary(vals)
        out[name] = stats[name]["median"]
    for name in ("num_requests", "num_ok", "num_failed", "output_tokens"):
        out[name] = int(sum(r[name] for r in runs))
    for name in ("stream_chunks", "empty_text_chunks"):
        out[name] = int(sum(r.get(name) or 0 for r in runs))
    out["tokens_per_chunk"] = (
        round(out["output_tokens"] / out["stream_chunks"], 3) if out["stream_chunks"] else None
    )
    out["multi_token_chunks"] = any(r.get("multi_token_chunks") for r in runs)
    prompt_tokens = [v for r in runs if (v := r.get("prompt_tokens_mean")) is not None]
    if prompt_tokens:
        out["prompt_tokens_mean"] = float(np.mean(prompt_tokens))
    out["errors"] = sorted({e for r in runs for e in r.get("errors", [])})[:5]
    if runs[0].get("per_position_acceptance"):
        k = len(runs[0]["per_position_acceptance"])
        out["per_position_acceptance"] = [
            float(np.median([r["per_position_acceptance"][i] for r in runs])) for i in range(k)
        ]
    for name in ("ttft_ms_values", "tpot_ms_values", "e2e_ms_values"):
        out[name] = [v for r in runs for v in r.get(name, [])]  # every repeat's requests
    out["repeats"] = len(runs)
    out["remeasured"] = remeasured
    out["stats"] = stats
    out["runs"] = [{k: r.get(k) for k in _RUN_KEYS} for r in runs]
    return out
