"""Statistics for paired seeds: bootstrap intervals of a median, an exact Wilcoxon test.

Why our own Wilcoxon: launches-to-success are small integers, so ties are the rule; scipy's
"exact" mode refuses ties and falls back to a normal approximation. Here the exact
permutation distribution of W+ is built over the observed (tied, averaged) ranks, so the
p-value is exact for every sample size we use (n <= 200).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["bootstrap_median_ci", "median", "wilcoxon_signed_rank"]


def median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, float))) if len(xs) else math.nan


def bootstrap_median_ci(
    xs: Sequence[float], *, n_boot: int = 5000, seed: int = 0
) -> tuple[float, float]:
    """Percentile 95 % bootstrap interval of the median (inf stays inf: never reached)."""
    a = np.asarray(xs, float)
    if a.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    meds = np.median(a[rng.integers(0, a.size, size=(n_boot, a.size))], axis=1)
    # No interpolation: an infinite median (never reached) must not turn into nan.
    lo = np.percentile(meds, 2.5, method="lower")
    hi = np.percentile(meds, 97.5, method="higher")
    return float(lo), float(hi)


def _ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``a``, ties given their average rank."""
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(a.size, float)
    s = a[order]
    i = 0
    while i < a.size:
        j = i
        while j + 1 < a.size and s[j + 1] == s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def wilcoxon_signed_rank(x: Sequence[float], y: Sequence[float]) -> float:
    """Two-sided paired Wilcoxon signed-rank p-value, exact.

    Zero differences are dropped (Wilcoxon's convention, scipy's default ``zero_method``);
    |d| ties get average ranks; under H0 each rank's sign is a fair coin, so the null law of
    W+ (the sum of positive ranks) is the distribution of a subset sum of the ranks, counted
    exactly on doubled (integer) ranks. p = 2 min(P(W+ <= w), P(W+ >= w)), capped at 1."""
    d = np.asarray(x, float) - np.asarray(y, float)
    d = d[d != 0]
    n = d.size
    if n == 0:
        return 1.0
    r2 = np.rint(2 * _ranks(np.abs(d))).astype(int)  # doubled ranks are integers
    w = int(r2[d > 0].sum())
    total = int(r2.sum())
    counts = np.zeros(total + 1, dtype=object)  # exact big-integer counts
    counts[0] = 1
    for r in r2:
        counts[r:] = counts[r:] + counts[: total + 1 - r].copy()
    denom = 2**n
    lo = sum(counts[: w + 1])
    hi = sum(counts[w:])
    return float(min(1.0, 2 * min(lo, hi) / denom))
