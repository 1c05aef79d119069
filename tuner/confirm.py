"""The end of a job: launch again until the winner is confirmed, within a budget.

Why: the launch is the unit of replication (``tuner.launches``). A winner launched once may
be a lucky launch, and a job that names it has not shown it; between finalists, only launches
made close together compare fairly on a host whose speed drifts. So, one launch at a time
(``next_launch`` decides, from the report as it stands after the last launch):

1. the baseline until it has two undisturbed launches (every verdict divides by it; a
   disturbed launch is launched again, never dropped), and the baseline of the winner's
   batch class too when that is another (``tuner.baselines``);
2. a configuration kept off the front only by noisy repeats that would rank above the
   winner (a disturbed launch is measured again, not only flagged);
3. the winner until it has two undisturbed launches (a new winner may take its place after
   each launch: the ranking is re-read);
4. the finalists: the next best feasible speculative configurations (``confirm_top`` with
   the winner), each to two launches (a runner-up launched once may have been unlucky) while
   the launches left could still tell it from the winner (``can_still_tell``), then,
   while the job cannot tell one apart from the winner, in turn, the one with the fewest
   launches first: A, B, A, B, as SMAC's intensification compares a challenger only on
   shared instances, and only while the launches left could still tell them apart
   (``can_still_tell``);
5. while the winner's verdict at the objective level is still "tied", the baseline and the
   winner in turn, to narrow it;

each configuration at most ``MAX_LAUNCHES`` times, until ``confirm_budget`` launches are
spent. A launch that fails is not tried again. The report says "unconfirmed" when the budget
ran out before the winner had two launches.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection
from typing import Any

from tuner.context import JobContext, TrialEvent
from tuner.engines import EngineConfig
from tuner.launches import (
    geometric_mean,
    launch_count,
    launch_values,
    launches_of,
    merge_launch,
)
from tuner.measure import Measurer, TrialFailed
from tuner.pareto import Point, Report, job_report
from tuner.stats import expected_gain, t975
from tuner.verdict import TIED

__all__ = [
    "MAX_LAUNCHES",
    "Confirmation",
    "can_still_tell",
    "confirm",
    "next_launch",
    "worth_a_launch",
]

log = logging.getLogger(__name__)

MAX_LAUNCHES = 4  # per configuration: beyond it, another launch narrows little (1/sqrt(n))


def _rank(rep: Report, points: list[Point]) -> list[Point]:
    """Best first on the first objective; points lacking it are left out."""
    metric, direction = rep.objectives[0]
    sign = -1.0 if direction == "maximize" else 1.0
    have = [p for p in points if p.metrics.get(metric) is not None]
    return sorted(have, key=lambda p: sign * float(p.metrics[metric]))


def _noise_only(p: Point) -> bool:
    """Infeasible only because its repeats were too noisy: worth launching again."""
    return bool(p.violations) and all(v.startswith("noisy") for v in p.violations)


def worth_a_launch(rep: Report, p: Point, w: Point, margin: float, min_gain: float) -> bool:
    """Whether another launch of finalist ``p`` may still find it better than the winner
    ``w`` by more than ``margin``: its expected gain (``tuner.stats.expected_gain``, over the
    log ratio of their launches with the job's between-launch spread) is at least
    ``min_gain``, the search's own stop rule (``tuner.search._stop``). Without a spread, or
    with ``min_gain`` 0, every finalist is."""
    metric, direction = rep.objectives[0]
    spread = rep.spreads.get(metric)
    vp, vw = launch_values(p.metrics, metric), launch_values(w.metrics, metric)
    if min_gain <= 0 or spread is None or not vp or not vw or min(vp + vw) <= 0:
        return True
    sign = 1.0 if direction == "maximize" else -1.0
    ratio = geometric_mean(vp) / geometric_mean(vw)
    sd = spread.log_sd * math.sqrt(1.0 / len(vp) + 1.0 / len(vw))
    return expected_gain(sign * math.log(ratio), sd, margin) >= min_gain


def can_still_tell(rep: Report, p: Point, w: Point, budget_left: int | None) -> bool:
    """Whether the launches left could still tell ``p`` from ``w`` on the first objective:
    every one spent on the pair (to the one with fewer first, each to ``MAX_LAUNCHES``), the
    95 % interval of their ratio around today's estimate would exclude 1. When it would not,
    launching them in turn only moves which of two ties ranks first (a futility stop, as a
    sequential trial stops once its conditional power is gone); they are named equivalent.
    Without a spread or a budget, it always could."""
    metric = rep.objectives[0][0]
    spread = rep.spreads.get(metric)
    vp, vw = launch_values(p.metrics, metric), launch_values(w.metrics, metric)
    if budget_left is None or spread is None or not vp or not vw or min(vp + vw) <= 0:
        return True
    n = [len(launches_of(p.metrics)), len(launches_of(w.metrics))]
    used = list(n)
    for _ in range(max(0, budget_left)):
        open_ = [i for i in (0, 1) if used[i] < MAX_LAUNCHES]
        if not open_:
            break
        used[min(open_, key=lambda i: used[i])] += 1
    gap = abs(math.log(geometric_mean(vp) / geometric_mean(vw)))
    df = spread.df + sum(used) - sum(n)
    half = t975(df) * spread.log_sd * math.sqrt(1.0 / used[0] + 1.0 / used[1])
    return half < gap


def next_launch(
    rep: Report,
    finalists: int,
    failed: Collection[int] = (),
    budget_left: int | None = None,
    *,
    margin: float = 0.0,
    min_gain: float = 0.0,
) -> int | None:
    """The trial to launch next to confirm the report's winner (module docstring), or None
    when nothing more is worth a launch. With ``budget_left`` launches left and no more than
    the baseline and the winner still owe (each to two launches), those come first: a noisy
    point launched again must not leave the answer itself unconfirmed. A finalist is
    launched only while ``worth_a_launch`` (``margin``, ``min_gain``: the search's stop
    rule); one that is not is named as equivalent or beaten, as its interval says."""

    def room(p: Point) -> bool:  # every launch counts here, disturbed or not
        return p.trial_number not in failed and len(launches_of(p.metrics)) < MAX_LAUNCHES

    w = rep.winner
    own = rep.baseline_of(w) if w is not None else None
    for b in (rep.baseline, own):
        if b is not None and launch_count(b.metrics) < 2 and room(b):
            return b.trial_number
    owed = w is not None and launch_count(w.metrics) < 2 and room(w)
    if owed and budget_left is not None and budget_left <= 2 - launch_count(w.metrics):
        return w.trial_number
    base = own or rep.baseline  # the winner's verdict divides by its class's baseline
    metric, direction = rep.objectives[0]
    sign = -1.0 if direction == "maximize" else 1.0

    def beats_winner(p: Point) -> bool:
        if w is None:
            return True
        return sign * float(p.metrics.get(metric) or 0.0) < sign * float(w.metrics[metric])

    # A point only noise kept off the front that would rank above the winner: launch it
    # again (a disturbed launch is measured again, not only flagged).
    retry = [p for p in _rank(rep, rep.points) if _noise_only(p) and room(p) and beats_winner(p)]
    if retry:
        return retry[0].trial_number
    if w is None:
        return None
    if launch_count(w.metrics) < 2:
        return w.trial_number if room(w) else None
    rivals = [
        p
        for p in _rank(rep, rep.points)
        if p.feasible and p.method != "none" and p.trial_number != w.trial_number
    ][: max(0, finalists - 1)]
    # Only while the launches left could still tell a finalist from the winner: a tie no
    # budget can resolve is named equivalent, not launched to reorder two ties.
    rivals = [
        p
        for p in rivals
        if worth_a_launch(rep, p, w, margin, min_gain) and can_still_tell(rep, p, w, budget_left)
    ]
    short = [p for p in rivals if launch_count(p.metrics) < 2 and room(p)]
    if short:  # every finalist to two launches: a runner-up launched once may be unlucky
        return short[0].trial_number
    close = [p for p in rivals if rep.indistinguishable(p, w)]
    if close:  # then in turn while the job cannot tell them apart: A, B, A, B
        open_ = [p for p in (w, *close) if room(p)]
        if open_:
            return min(open_, key=lambda p: launch_count(p.metrics)).trial_number
    v = rep.verdict(w)
    if w.method != "none" and v is not None and v.state == TIED and base is not None:
        pair = [p for p in (base, w) if room(p)]
        if pair:
            return min(pair, key=lambda p: launch_count(p.metrics)).trial_number
    return None


class Confirmation:
    """The job's confirmation launches, one at a time, as ``next_launch`` says, within
    ``confirm_budget`` (a launch that fails counts, and its trial is not tried again). The
    job's loop (``tuner.job``) asks it between search launches too: the baseline and the
    winner confirmed early give the bound that tells the search when nothing can win."""

    def __init__(self, ctx: JobContext, measurer: Measurer) -> None:
        self.ctx, self.measurer = ctx, measurer
        ms = ctx.space.measurement
        self.enabled = ms.confirm_top > 0 and ms.confirm_budget > 0 and measurer.live
        self.failed: set[int] = set()
        self.done: list[int] = []
        self.spent = 0

    @property
    def budget_left(self) -> int:
        return max(0, self.ctx.space.measurement.confirm_budget - self.spent)

    def next(self, rep: Report, reserve: int = 0) -> int | None:
        """The trial to launch again next, or None (off, budget spent, or nothing worth it).
        ``reserve`` launches are kept back: the search asks with one kept for a winner it
        may still find, so the job's answer is never left unconfirmed by earlier ones."""
        left = self.budget_left - reserve
        if not self.enabled or left <= 0:
            return None
        space = self.ctx.space
        return next_launch(
            rep,
            space.measurement.confirm_top,
            self.failed,
            budget_left=left,
            margin=space.stop_margin,
            min_gain=space.stop_min_gain,
        )

    def launch(self, number: int) -> bool:
        """One confirmation launch of ``number``; False when it failed."""
        ok = _launch(self.ctx, self.measurer, number, self.spent)
        self.spent += 1
        if ok:
            self.done.append(number)
        else:
            self.failed.add(number)
        return ok

    def outcome(self, rep: Report) -> str:
        """How confirmation ended, for the job's stop reason."""
        w = rep.winner
        if w is None:
            return "no winner to confirm"
        n = launch_count(w.metrics)
        if not self.enabled:
            return f"confirmation off: the winner (trial {w.trial_number}) launched {n} time(s)"
        left = self.budget_left
        state = "confirmed" if n >= 2 else "unconfirmed"
        spent = f"{self.spent} confirmation launch{'es' if self.spent != 1 else ''}"
        tail = "" if left > 0 else ", the confirmation budget spent"
        return f"the winner (trial {w.trial_number}) is {state} over {n} launches ({spent}{tail})"


def confirm(ctx: JobContext, measurer: Measurer) -> list[int]:
    """Launch again, one configuration at a time, until ``next_launch`` says stop or the
    budget is spent (``Confirmation``); each launch's numbers are merged into the trial's
    stored points (``tuner.launches.merge_launch``). Returns the trials launched."""
    conf = Confirmation(ctx, measurer)
    while not ctx.control.cancelled:
        number = conf.next(job_report(ctx.store, ctx.job_id))
        if number is None:
            break
        conf.launch(number)
    return conf.done


def _launch(ctx: JobContext, measurer: Measurer, number: int, i: int) -> bool:
    store, job_id, space = ctx.store, ctx.job_id, ctx.space
    row = store.trial(job_id, number)
    cfg = EngineConfig.from_dict(row.engine_config)
    ctx.hooks.started(number, {"confirm": True, **row.params})
    t0 = time.monotonic()
    try:
        got = measurer.measure(
            cfg, row.params, ctx.log_dir / f"confirm-{number}-{i}.log", confirm=True
        )
    except TrialFailed as e:
        log.warning("confirmation launch of trial %s failed: %s", number, e)
        return False

    def keep(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        return merge_launch(old, new)

    new = {(m["workload"], m["concurrency"]): m for m in got.points}
    store.replace_measurements(job_id, number, new, keep)
    if ctx.hooks.on_trial is not None:
        m = new.get((space.primary_workload, space.primary_concurrency), {})
        summary = (
            f"{m.get('output_tok_per_s', 0):.1f} tok/s, p99 TPOT "
            f"{m.get('p99_tpot_ms') or float('nan'):.2f} ms (this launch)"
        )
        ctx.hooks.ended(
            TrialEvent(
                number,
                ctx.n_trials,
                "confirmed",
                row.method,
                row.params,
                time.monotonic() - t0,
                summary,
            )
        )
    return True
