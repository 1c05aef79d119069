"""The launch is the unit of replication: each launch's numbers, the job's between-launch
spread, and the intervals built on it.

Why: one launch's repeats share its memory layout, thread placement and warm caches, so they
agree far better than two launches do (issue 21: a re-launch moved throughput by up to 46 %
on a 2-core host; vLLM users report 10-20 % on GPUs). An interval from repeats alone
promises what a second launch breaks. So every stored point keeps one record per launch
(``launches``), the job pools the spread of configurations launched at least twice (on the
log scale: launch-to-launch changes are multiplicative), per workload, concurrency level
and metric, and every interval and verdict uses that spread:

- a configuration's value is the geometric mean of its n launches; its 95 % interval is
  where one more launch lands, ``exp(mean ± t(0.975, df) · s · sqrt(1 + 1/n))``, ``s`` the
  pooled spread with ``df`` degrees of freedom: a configuration launched once carries the
  job's spread (what ``bench/relaunch.py``'s coverage checks);
- the ratio of two configurations' expected values (a speedup, and whether two can be told
  apart) is ``exp(Δmean ± t · s · sqrt(1/n₁ + 1/n₂))``.

A launch whose repeats were still too noisy after being measured again in that launch is
``disturbed``: once the configuration has an undisturbed launch, disturbed ones are kept in
the record but left out of its value and of the pooled spread (they measured the host, not
the configuration). Earlier jobs on the same hardware, engine and target pool their spread
into the job's, with a capped weight (``tuner.launch_history``). When neither the job nor
that history has a configuration launched twice (a replay, a first job with confirmation
off), there is no between-launch spread: intervals fall back to repeats within one launch
and say so (``WITHIN``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tuner.stats import STAT_METRICS, t975

__all__ = [
    "noise_reason",
    "BETWEEN",
    "LAUNCH_METRICS",
    "WITHIN",
    "HistorySpread",
    "IntervalKind",
    "LaunchSpread",
    "geometric_mean",
    "good_launches",
    "launch_count",
    "launch_record",
    "launch_values",
    "launch_interval",
    "launches_of",
    "level_spreads",
    "log_cv",
    "spread_names",
    "spread_values",
    "merge_launch",
    "ms_per_token",
    "pooled_spread",
    "ratio_interval",
]

IntervalKind = Literal["between launches", "within one launch"]
BETWEEN: IntervalKind = "between launches"
WITHIN: IntervalKind = "within one launch"

# The medians a launch record keeps: every metric a point keeps with its spread (any of them
# may be an objective), and ms per token (what a verdict reads).
LAUNCH_METRICS = (*STAT_METRICS, "ms_per_token")
# Top-level numbers of a point launched several times: the geometric mean of its launches
# (acceptance is counted over tokens and stays the latest launch's).
_COMBINED = tuple(
    m for m in STAT_METRICS if m not in ("acceptance_rate", "mean_acceptance_length")
)


def ms_per_token(m: Mapping[str, Any]) -> float | None:
    """Mean end-to-end ms per output token of one launch's point (``tuner.verdict``'s
    measure of "pays"); None when no request finished."""
    e2e, tokens, ok = m.get("mean_e2e_ms"), m.get("output_tokens"), m.get("num_ok")
    if not e2e or not tokens or not ok:
        return None
    return float(e2e) / (tokens / ok)


def launch_record(point: Mapping[str, Any], *, confirm: bool) -> dict[str, Any]:
    """What one launch measured at one point: its medians, whether its repeats stayed
    noisy (``disturbed``), and whether it was a confirmation launch."""
    rec: dict[str, Any] = {k: point.get(k) for k in LAUNCH_METRICS if k != "ms_per_token"}
    rec["ms_per_token"] = ms_per_token(point)
    rec["relative_mad"] = point.get("relative_mad")
    rec["disturbed"] = bool(point.get("noisy"))
    rec["confirm"] = confirm
    return rec


def launches_of(point: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every launch record of a stored point; points stored before records existed give
    theirs from what they kept (a confirmed one: its search launch under ``search``)."""
    if point.get("launches"):
        return [dict(r) for r in point["launches"]]
    if point.get("confirmed") and point.get("search"):
        old = dict(point["search"])
        first = {k: old.get(k) for k in LAUNCH_METRICS}
        first.update(relative_mad=old.get("relative_mad"), disturbed=bool(old.get("noisy")))
        return [{**first, "confirm": False}, launch_record(point, confirm=True)]
    return [launch_record(point, confirm=False)]


def good_launches(point: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The launches a point's value rests on: the undisturbed ones, or all when every launch
    was disturbed."""
    recs = launches_of(point)
    good = [r for r in recs if not r.get("disturbed")]
    return good or recs


def launch_values(point: Mapping[str, Any], metric: str) -> list[float]:
    """``metric`` of each launch the point's value rests on (positive values only)."""
    out = []
    for r in good_launches(point):
        v = r.get(metric)
        if v is not None and float(v) > 0:
            out.append(float(v))
    return out


def launch_count(point: Mapping[str, Any]) -> int:
    """How many undisturbed launches measured the point (0 when every one was disturbed)."""
    return sum(not r.get("disturbed") for r in launches_of(point))


def spread_values(point: Mapping[str, Any], metric: str) -> list[float]:
    """``metric`` of the point's undisturbed launches only: what the pooled spread reads (a
    configuration whose every launch was disturbed measured the host, not itself)."""
    return [
        float(r[metric])
        for r in launches_of(point)
        if not r.get("disturbed") and r.get(metric) is not None and float(r[metric]) > 0
    ]


def geometric_mean(values: Sequence[float]) -> float:
    """The mean of positive values on the log scale: how launches combine."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def merge_launch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A point measured again in another launch: ``new``'s detail (repeats, stats, raw
    values) with every launch's record under ``launches``, the top-level medians a reader
    ranks on combined over the undisturbed launches (geometric mean), ``noisy`` only when
    every launch was disturbed, and the search launch's numbers kept under ``search``."""
    recs = launches_of(old) + [launch_record(new, confirm=True)]
    out = dict(new)
    out["launches"] = recs
    out["confirmed"] = True
    out["search"] = dict(old.get("search") or _search_keys(old))
    good = [r for r in recs if not r.get("disturbed")] or recs
    for k in _COMBINED:
        vals = [float(r[k]) for r in good if r.get(k) is not None and float(r[k]) > 0]
        if vals:
            out[k] = geometric_mean(vals)
    if isinstance(new.get("score"), dict):
        # Ranked on the launches, with the latest launch's noise penalty in proportion, so a
        # point launched again is scored as one launched once is (median moved by its MAD).
        out["score"] = {
            k: out[k] * (v / new[k]) if k in _COMBINED and new.get(k) else v
            for k, v in new["score"].items()
        }
    out["noisy"] = all(r.get("disturbed") for r in recs)
    if not out["noisy"] and new.get("noisy"):
        out["relative_mad"] = min(
            (r["relative_mad"] for r in good if r.get("relative_mad") is not None),
            default=new.get("relative_mad"),
        )
    return out


_SEARCH_KEYS = (
    "output_tok_per_s",
    "p99_tpot_ms",
    "mean_tpot_ms",
    "mean_e2e_ms",
    "p99_ttft_ms",
    "acceptance_rate",
    "stats",
    "score",
    "noisy",
    "relative_mad",
)


def _search_keys(point: Mapping[str, Any]) -> dict[str, Any]:
    return {k: point.get(k) for k in _SEARCH_KEYS}


def log_cv(log_sd: float) -> float:
    """A log-scale standard deviation as a coefficient of variation (of a log-normal)."""
    return math.sqrt(math.expm1(log_sd**2))


@dataclass(frozen=True)
class HistorySpread:
    """What earlier jobs on the same machine, engine and target hold of one metric at one
    level (``tuner.launch_history``): their pooled log-scale spread, its degrees of freedom
    (uncapped) and how many jobs and configurations it rests on."""

    log_sd: float
    df: int
    jobs: int
    configurations: int

    @property
    def cv(self) -> float:
        return log_cv(self.log_sd)


@dataclass(frozen=True)
class LaunchSpread:
    """The job's between-launch spread of one metric at one level: the pooled standard
    deviation of log values over configurations launched at least twice, with the
    machine's history pooled in when there is some (``tuner.launch_history``): ``df`` is
    what every t quantile reads, ``own_df`` + ``history_df``."""

    log_sd: float
    df: int  # sum over this job's configurations of (launches - 1), plus history_df
    configurations: int  # this job's configurations launched at least twice
    history_jobs: int = 0  # earlier jobs whose launches are pooled in
    history_df: int = 0  # the weight they carry: min(their df, the cap); 0 when not pooled
    own_log_sd: float | None = None  # this job's own spread (None: nothing launched twice)
    history: HistorySpread | None = None  # what the history held, pooled or not
    history_p: float | None = None  # F-test: p of a job spread this much over history's

    @property
    def cv(self) -> float:
        """The spread as a coefficient of variation (of a log-normal)."""
        return log_cv(self.log_sd)

    @property
    def own_df(self) -> int:
        """This job's own degrees of freedom (0: it launched nothing twice)."""
        return self.df - self.history_df

    @property
    def history_refused(self) -> bool:
        """History was there but not pooled: this job's spread is larger (the F-test)."""
        return self.history is not None and self.history_df == 0


def pooled_spread(values_by_config: Iterable[Sequence[float]]) -> LaunchSpread | None:
    """Pool the log-scale variance of every configuration with two or more launch values;
    None when there is none (nothing was launched twice)."""
    ss, df, k = 0.0, 0, 0
    for values in values_by_config:
        logs = [math.log(v) for v in values if v > 0]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        ss += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
        k += 1
    if df == 0:
        return None
    return LaunchSpread(math.sqrt(ss / df), df, k, own_log_sd=math.sqrt(ss / df))


def launch_interval(values: Sequence[float], spread: LaunchSpread) -> tuple[float, float, float]:
    """(geometric mean, 95 % low, 95 % high) for where one more launch of a configuration
    lands, from its n launch values: ``exp(mean ± t(df) · s · sqrt(1 + 1/n))``. What a user
    who launches the exported configuration again should expect; a configuration launched
    once carries the job's spread sqrt(2) times."""
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    half = t975(spread.df) * spread.log_sd * math.sqrt(1 + 1 / len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def ratio_interval(
    num: Sequence[float], den: Sequence[float], spread: LaunchSpread
) -> tuple[float, float, float]:
    """(ratio of geometric means num/den, 95 % low, 95 % high) of two configurations."""
    a = sum(math.log(v) for v in num) / len(num)
    b = sum(math.log(v) for v in den) / len(den)
    half = t975(spread.df) * spread.log_sd * math.sqrt(1 / len(num) + 1 / len(den))
    return math.exp(a - b), math.exp(a - b - half), math.exp(a - b + half)


def spread_names(metrics: Sequence[str]) -> list[str]:
    """The metrics a spread is pooled for: output tok/s, ms per token (what a verdict
    reads), p99 TPOT and the objectives."""
    return list(dict.fromkeys(["output_tok_per_s", "ms_per_token", "p99_tpot_ms", *metrics]))


def level_spreads(
    by_trial: Mapping[int, Mapping[int, Mapping[str, Any]]], metrics: Sequence[str]
) -> dict[int, dict[str, LaunchSpread]]:
    """The between-launch spread at each level, per metric (the objectives, output tok/s and
    ms per token), pooled over every configuration of the report launched at least twice."""
    names = spread_names(metrics)
    levels = {c for per in by_trial.values() for c in per}
    out: dict[int, dict[str, LaunchSpread]] = {}
    for c in sorted(levels):
        pts = [per[c] for per in by_trial.values() if c in per]
        got = {n: pooled_spread(spread_values(m, n) for m in pts) for n in names}
        out[c] = {n: sp for n, sp in got.items() if sp is not None}
    return out


def noise_reason(m: dict[str, Any]) -> str:
    """Why a point is flagged noisy: its repeats disagreed, or other processes took the
    host's CPU while they ran (``measurement.max_host_load``)."""
    if m.get("host_disturbed"):
        share = float(m.get("host_other_cpu_share") or 0)
        return f"noisy: other processes used {share:.0%} of the host's CPU"
    return f"noisy: relative MAD {m.get('relative_mad', 0):.0%}"
