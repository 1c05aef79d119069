"""Sharper between-launch intervals from the machine's history (issue 32): the spread of
earlier jobs on the same hardware, engine and target is pooled into a job's own, with a
capped weight, unless today's host is plainly noisier.

Why: a job that launched two configurations twice has 2 degrees of freedom, so every
interval reads t(0.975, 2) = 4.30 and a 1.48x gap can be "cannot tell apart". The spread is
a property of the host, the engine, the target and the load level (the concurrency), not of
the workload: a busy host moves every workload's launch alike. So it is pooled over earlier
jobs with the same hardware fingerprint (``tuner.hardware``), engine kind and target (as the
warm start compares them), per concurrency level and metric, whatever their workloads; never
across machines, engines or targets. Only succeeded jobs give, never the job itself, only
those that finished before it did (all so far while it runs: an ended job's report never
changes when later jobs finish), and a replayed job (a recorded surface) neither gives nor
takes: it measured no machine.

The rule, an empirical-Bayes pooled variance (the moderated variance of Smyth 2004, limma).
On the log scale launch j of configuration i is ``y_ij = mu_i + e_ij``, ``e ~ N(0, s^2)``.
The job's own pooled estimate ``s_job^2`` has ``d = sum(n_i - 1)`` degrees of freedom:
``d s_job^2 / s^2 ~ chi2(d)``. Give ``s^2`` the conjugate prior, a scaled inverse chi-square
with ``d0`` degrees of freedom and scale ``s_h^2``; its posterior is the same family with
``d0 + d`` degrees of freedom and scale

    s^2 = (d * s_job^2 + d0 * s_h^2) / (d + d0),

and where one more launch lands is a t with ``d + d0`` degrees of freedom: every interval of
``tuner.launches`` stands, with this ``s`` and ``df = d + d0``. Empirical Bayes: ``s_h^2``
is the history's own pooled estimate (the same pooling over earlier jobs' configurations
launched twice; ``df_h`` the sum of their ``n_i - 1``). Were the spread the same in every
job, ``d0 = df_h`` would be plain pooling. It is not: it moves with the host's load over
hours (docs/concepts/launches.md: 2 % one hour and 9 % the next on one host), so history
says what the machine usually does, not what it does today, and ``d0 = min(df_h,
HISTORY_CAP)`` with ``HISTORY_CAP = 20``. Why 20: t(0.975, 20) = 2.09 is within 7 % of the
normal's 1.96, so more history could narrow an interval by at most that much while letting
old hours outweigh today's evidence; at 20 the job's own evidence weighs half once it has 20
degrees of freedom itself. Where it matters it does: a job with d = 2 goes from t = 4.30 to
t(22) = 2.07.

The guard: pooling a quieter history into a noisier today would make today's intervals too
narrow and declare differences that are not there. So a one-sided F-test at
``HISTORY_ALPHA = 0.05``: ``F = s_job^2 / s_h^2 ~ F(d, df_h)`` when the two are the same; when
``P(F(d, df_h) >= F) < 0.05`` the history is not pooled (the host is in another state today)
and the report says so. It uses the uncapped ``df_h`` (how well history knows its spread),
which refuses more often: the safe side. A job spread smaller than history's is pooled: its
``s`` comes out larger than the job's own (the conservative side), and its interval narrows
only through the degrees of freedom the history adds. The hours of
docs/concepts/launches.md, 9 % today against 2 % before (d = 2, df_h >= 20: F = 20,
p < 0.001), are refused.

A job that launched nothing twice (``d = 0``; confirmation off) but has history takes the
history's spread with ``d0`` degrees of freedom, instead of falling back to the repeats within
one launch: those share one launch's memory layout and warm caches and miss where another
launch lands (issue 21: moves of up to 46 %), while the machine's measured between-launch
spread is what a second launch of this configuration would meet. Its intervals say "between
launches", with the history named. A first job on a machine (no history) is exactly as
before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tuner.launches import (
    HistorySpread,
    LaunchSpread,
    level_spreads,
    pooled_spread,
    spread_names,
    spread_values,
)
from tuner.storage import Store

__all__ = [
    "HISTORY_ALPHA",
    "HISTORY_CAP",
    "f_sf",
    "history_spreads",
    "history_text",
    "job_spreads",
    "pool_with_history",
]

HISTORY_CAP = 20  # the most degrees of freedom history may add (see the module docstring)
HISTORY_ALPHA = 0.05  # the F-test's level: a job spread this unlikely is not pooled


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-13:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(ln + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def f_sf(f: float, df1: int, df2: int) -> float:
    """P(F(df1, df2) >= f): the F-test's p-value (numpy and the standard library only; the
    project does not depend on scipy)."""
    if f <= 0.0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return _betainc(df2 / 2.0, df1 / 2.0, df2 / (df2 + df1 * f))


def _history_of(points: Iterable[Mapping[str, Any]], metric: str) -> LaunchSpread | None:
    return pooled_spread(spread_values(m, metric) for m in points)


def history_spreads(
    points_by_job: Mapping[int, Sequence[Mapping[str, Any]]], metrics: Sequence[str]
) -> dict[int, dict[str, HistorySpread]]:
    """What earlier jobs hold, per level and metric: their log-scale spreads pooled (sums of
    squares and degrees of freedom added over jobs), with how many jobs and configurations
    launched at least twice gave to it."""
    by_level: dict[int, dict[int, list[Mapping[str, Any]]]] = {}
    for jid, points in points_by_job.items():
        for m in points:
            by_level.setdefault(int(m["concurrency"]), {}).setdefault(jid, []).append(m)
    out: dict[int, dict[str, HistorySpread]] = {}
    for c, jobs in sorted(by_level.items()):
        for name in spread_names(metrics):
            ss, df, n_jobs, configs = 0.0, 0, 0, 0
            for points in jobs.values():
                sp = _history_of(points, name)
                if sp is not None:
                    ss += sp.log_sd**2 * sp.df
                    df += sp.df
                    n_jobs += 1
                    configs += sp.configurations
            if df:
                out.setdefault(c, {})[name] = HistorySpread(
                    math.sqrt(ss / df), df, n_jobs, configs
                )
    return out


def pool_with_history(
    own: LaunchSpread | None,
    history: HistorySpread | None,
    *,
    cap: int = HISTORY_CAP,
    alpha: float = HISTORY_ALPHA,
) -> LaunchSpread | None:
    """The job's spread of one metric at one level with the history pooled in (the module
    docstring's rule): ``own`` unchanged without history, the history's own (``min(df_h,
    cap)`` degrees of freedom) without ``own``, ``own`` with the refusal recorded when the
    F-test says today's spread is larger, else the capped weighted pool."""
    if history is None or history.df <= 0:
        return own
    d0 = min(history.df, cap)
    if own is None:
        return LaunchSpread(
            history.log_sd, d0, 0, history_jobs=history.jobs, history_df=d0, history=history
        )
    if history.log_sd > 0:
        p = f_sf((own.log_sd / history.log_sd) ** 2, own.df, history.df)
    else:  # history never moved: any spread today is another state, none is the same one
        p = 0.0 if own.log_sd > 0 else 1.0
    if p < alpha:
        return LaunchSpread(
            own.log_sd,
            own.df,
            own.configurations,
            own_log_sd=own.log_sd,
            history=history,
            history_p=p,
        )
    var = (own.df * own.log_sd**2 + d0 * history.log_sd**2) / (own.df + d0)
    return LaunchSpread(
        math.sqrt(var),
        own.df + d0,
        own.configurations,
        history_jobs=history.jobs,
        history_df=d0,
        own_log_sd=own.log_sd,
        history=history,
        history_p=p,
    )


def job_spreads(
    store: Store | None,
    job_id: int,
    target: str,
    by_trial: Mapping[int, Mapping[int, Mapping[str, Any]]],
    objectives: Sequence[tuple[str, str]],
) -> dict[int, dict[str, LaunchSpread]]:
    """The between-launch spread at each level of the report, per metric: the job's own
    (``level_spreads``) with the machine's history pooled in. One ``Store`` call a report;
    ``store`` None: the job's own only (a caller that reads no interval)."""
    metrics = [name for name, _ in objectives]
    own = level_spreads(by_trial, metrics)
    if store is None or not own:
        return own
    hist = history_spreads(store.launch_history(job_id, target=target), metrics)
    out: dict[int, dict[str, LaunchSpread]] = {}
    for c, mine in own.items():
        there = hist.get(c, {})
        got = {n: pool_with_history(mine.get(n), there.get(n)) for n in spread_names(metrics)}
        out[c] = {n: sp for n, sp in got.items() if sp is not None}
    return out


def history_text(sp: LaunchSpread) -> str | None:
    """Where the spread's degrees of freedom come from, when history was weighed: "df 22:
    this job 2 + 20 from 3 earlier jobs on this machine"; None when there was none."""
    h = sp.history
    if h is None:
        return None
    jobs = f"{h.jobs} earlier job{'s' if h.jobs != 1 else ''} on this machine"
    if sp.history_refused:
        return (
            f"df {sp.df}, this job only: {jobs} measured {h.cv:.1%}, and this job's "
            f"{sp.cv:.1%} is larger (F-test p={sp.history_p:.2g}): the host is not in the "
            "state they saw, so they are not pooled"
        )
    of = f" (of {h.df})" if h.df > sp.history_df else ""
    if not sp.own_df:
        return f"df {sp.df}{of}, all from {jobs}: this job launched nothing twice"
    return f"df {sp.df}: this job {sp.own_df} + {sp.history_df}{of} from {jobs}"
