"""The one definition of "pays": every table, sentence, chart and export reads it from here.

Speculation pays when its time per committed output token (prefill, draft, verify and
coordination, as the client sees it) is below the baseline's at the same concurrency and
workload. The time is a request's end-to-end time over its output tokens (mean end-to-end /
tokens per request), not TPOT: when a starved front end delivers tokens in bursts, TTFT
absorbs decode time and TPOT shrinks, but end-to-end does not move -- and at a fixed
concurrency it is what the tok/s column measures, so the two cannot disagree. Both numbers
are combined over the launches that measured them (``tuner.launches``): the speedup
(baseline ms per token / this configuration's) is the ratio of their geometric means, and its
95% interval uses the job's between-launch spread at that level (earlier jobs on the same
machine, engine and target pooled in: ``tuner.launch_history``), so a configuration launched
once carries that spread. The verdict is:

- ``pays``: the whole speedup interval is above 1;
- ``does not pay``: the whole interval is below 1;
- ``tied``: the interval holds 1: the launches cannot tell the two apart.

When nothing was launched twice, in the job or before it on the machine (a replay of a
recorded surface, a first job with confirmation off), there is no between-launch spread: the
interval is the one the repeats of each launch give, and the verdict says so
(``interval_kind`` "within one launch"). A point measured once in such a job has no
interval: its verdict is the plain comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tuner.launches import (
    BETWEEN,
    WITHIN,
    IntervalKind,
    LaunchSpread,
    geometric_mean,
    launch_values,
    ratio_interval,
)
from tuner.launches import ms_per_token as _ms_per_token

__all__ = [
    "DOES_NOT_PAY",
    "PAYS",
    "TIED",
    "Verdict",
    "VerdictState",
    "crossover_concurrency",
    "level_summary",
    "per_token",
    "verdicts",
]

VerdictState = Literal["pays", "does not pay", "tied"]
PAYS: VerdictState = "pays"
DOES_NOT_PAY: VerdictState = "does not pay"
TIED: VerdictState = "tied"

_METRIC = "mean_e2e_ms"


def per_token(m: Mapping[str, Any]) -> tuple[float, tuple[float, float] | None] | None:
    """(mean end-to-end ms per output token, its 95% interval) of a stored point; None when
    it lacks the numbers (no request finished)."""
    value = _ms_per_token(m)
    if value is None:
        return None
    per_request = m["output_tokens"] / m["num_ok"]
    st = (m.get("stats") or {}).get(_METRIC)
    ci = None
    if st and st.get("n", 1) >= 2:
        ci = (float(st["ci95_low"]) / per_request, float(st["ci95_high"]) / per_request)
    return value, ci


@dataclass(frozen=True)
class Verdict:
    """One speculative configuration against the baseline at one concurrency."""

    concurrency: int
    spec_ms_per_token: float
    baseline_ms_per_token: float
    spec_ci95: tuple[float, float] | None = None
    baseline_ci95: tuple[float, float] | None = None
    # Per-launch ms per token of each side and the job's between-launch spread at this
    # level: when the spread is known, the interval comes from launches, not repeats.
    spec_launches: tuple[float, ...] = ()
    baseline_launches: tuple[float, ...] = ()
    spread: LaunchSpread | None = None

    @property
    def interval_kind(self) -> IntervalKind:
        """Whether the interval covers the spread between launches or only repeats."""
        ok = self.spread is not None and self.spec_launches and self.baseline_launches
        return BETWEEN if ok else WITHIN

    @property
    def speedup(self) -> float:
        """Baseline ms per token over this configuration's: >1 is faster."""
        return self.baseline_ms_per_token / self.spec_ms_per_token

    @property
    def speedup_ci95(self) -> tuple[float, float]:
        if self.interval_kind == BETWEEN:
            assert self.spread is not None
            _, lo, hi = ratio_interval(self.baseline_launches, self.spec_launches, self.spread)
            return lo, hi
        if self.spec_ci95 is None or self.baseline_ci95 is None:
            return self.speedup, self.speedup
        (s_lo, s_hi), (b_lo, b_hi) = self.spec_ci95, self.baseline_ci95
        lo = b_lo / s_hi if s_hi > 0 else math.inf
        hi = b_hi / s_lo if s_lo > 0 else math.inf
        return min(lo, self.speedup), max(hi, self.speedup)

    @property
    def state(self) -> VerdictState:
        lo, hi = self.speedup_ci95
        if lo > 1.0:
            return PAYS
        if hi < 1.0:
            return DOES_NOT_PAY
        return TIED

    @property
    def pays_off(self) -> bool:
        return self.state == PAYS

    @property
    def margin_pct(self) -> float:
        """How much faster (+) or slower (-) per token than the baseline, in percent."""
        return (self.speedup - 1.0) * 100.0

    def text(self) -> str:
        lo, hi = self.speedup_ci95
        rng = (
            ""
            if lo == hi
            else f" (speedup {self.speedup:.2f}x [{lo:.2f}-{hi:.2f}], 95% {self.interval_kind})"
        )
        if self.state == PAYS:
            return f"pays off by {abs(self.margin_pct):.1f}%{rng}"
        if self.state == DOES_NOT_PAY:
            return f"does not pay by {abs(self.margin_pct):.1f}%{rng}"
        return f"is tied with the baseline within noise ({self.margin_pct:+.1f}%){rng}"

    def short(self) -> str:
        """``+20% pays``, ``-14% no``, ``~-3% tied``: one table cell."""
        word = {PAYS: "pays", DOES_NOT_PAY: "no", TIED: "tied"}[self.state]
        return f"{self.margin_pct:+.0f}% {word}"


def verdicts(
    spec_by_conc: Mapping[int, Mapping[str, Any]],
    base_by_conc: Mapping[int, Mapping[str, Any]],
    spread_by_conc: Mapping[int, LaunchSpread | None] | None = None,
) -> list[Verdict]:
    """The verdict at every concurrency both were measured at, lowest first. With the job's
    between-launch spread of ms per token at a level, each side is the geometric mean of its
    launches and the interval is the launches'."""
    out = []
    for c in sorted(spec_by_conc):
        sm, bm = spec_by_conc[c], base_by_conc.get(c, {})
        s, b = per_token(sm), per_token(bm)
        if s is None or b is None:
            continue
        spread = (spread_by_conc or {}).get(c)
        sl = tuple(launch_values(sm, "ms_per_token"))
        bl = tuple(launch_values(bm, "ms_per_token"))
        if spread is not None and sl and bl:
            out.append(
                Verdict(c, geometric_mean(sl), geometric_mean(bl), s[1], b[1], sl, bl, spread)
            )
        else:
            out.append(Verdict(c, s[0], b[0], s[1], b[1]))
    return out


def crossover_concurrency(vs: list[Verdict]) -> int | None:
    """Lowest measured concurrency from which it pays at no higher level measured; None
    when it pays at the highest level (or nothing was compared). When it pays nowhere, this
    is the lowest level."""
    cross = None
    for v in reversed(vs):
        if v.state == PAYS:
            break
        cross = v.concurrency
    return cross


def level_summary(vs: list[Verdict]) -> str:
    """One sentence over every level, from the same verdicts as every table."""
    if not vs:
        return "No level was compared with the baseline."
    levels = ", ".join(str(v.concurrency) for v in vs)
    states = {v.state for v in vs}
    if states == {PAYS}:
        return f"It pays at every concurrency measured ({levels})."
    if PAYS not in states:
        if states == {DOES_NOT_PAY}:
            return f"It pays at no concurrency measured ({levels})."
        return (
            f"It pays at no concurrency measured ({levels}): "
            + ", ".join(f"c={v.concurrency} {v.state}" for v in vs)
            + "."
        )
    cross = crossover_concurrency(vs)
    per = ", ".join(f"c={v.concurrency} {v.state}" for v in vs)
    if cross is None:
        return f"It pays at the highest concurrency measured ({per})."
    return (
        f"It stops paying from concurrency {cross} ({per}): above that, serve without "
        "speculation or use a depth schedule."
    )
