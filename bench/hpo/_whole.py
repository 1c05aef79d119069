"""Whole-job mode of the search benchmark: the job's own stop rule and its confirmation.

Why: launches-to-first-success scores a search by an oracle that knows when its
recommendation is right; a user only gets the job's FINAL CONFIRMED answer, after the job
stops by itself and after the confirmation launches. Here every launch counts, confirmation
included, and the answer is scored by the surface's truth (``Truth``).

- ``spectune``: the product's ``run_job`` (``engine.kind: replay``) with ``trials`` = the
  benchmark's budget as a cap only, ``stop_early`` on (the job closes the search when nothing
  left can win, ``tuner.search._stop``) and the measurement confirmation ON with the product
  defaults ``confirm_top: 2``, ``confirm_budget: 4`` (the surfaces record ``confirm_top: 0``),
  and without the recorded space's ``start_with`` (a user's own guesses; the default job,
  ``search_spaces/tiny-cpu.yaml``, has none: it launches what its prices say can win).
  The replay measurer is marked ``live`` for the run (bench only), else ``tuner.confirm``
  skips a replay. Launches = every engine launch the replay engine answered (search trials
  launched, a failed launch included, + confirmation launches; a reused measurement is not
  a launch); the store's ``engine_launches``/``confirm_launches`` are reported beside.
- relaunch model: each launch of a configuration, a relaunch included, answers with ONE
  recorded repeat drawn anew (``draw_index`` of its n-th launch in the seed; with
  replacement, so with 3 repeats a relaunch repeats the same numbers one time in three),
  so a relaunch draws a new launch median from the recorded repeats: the replay's own
  drawing engine (``bench.hpo._strategies._drawing_engine``), reused as it is. Every
  configuration on the repository's surfaces has 3 recorded repeats (the simulated ones a
  spread taken from tiny-cpu's 252 repeats), so no extra launch-noise model is needed; a
  configuration with a single recorded repeat would give a relaunch the same numbers (the
  between-launch spread is then the repeats' spread: issue 21 measured launches to differ
  more, so this understates the noise a confirmation must see through).
- baselines (``tpe``, ``random``, ``grid``, ...): no stop rule of their own, so each gets an
  ORACLE stop (generous to them): its search log is cut after n launches, the same
  confirmation rule is applied (``confirm_like_product``), and the fewest n + confirmation
  launches whose confirmed answer is a success is its ``confirmed_launches``. Beside it,
  ``success_at_spectune_launches``: the confirmed answer after as many search launches as
  SpecTune's job used on that seed (equal search effort, paired).
- the confirmation rule applied to a baseline (the product's ``next_launch`` steps 1, 3, 4
  without the A/B turns and the tie narrowing, which need the product's intervals): the
  no-speculation baseline (``baseline_params``) to two launches, the incumbent to two, the
  runner-up to two, re-ranked after each launch on the geometric mean of its launches (the
  product's ``merge_launch``), at most ``confirm_budget`` launches; a configuration is
  feasible when at least half of its launches were.
- scores per seed: the answer is the report's winner after confirmation (``job_report``'s
  ``winner``; for a baseline, the rule's ranking), a success as ``Truth`` says, whether or
  not it got its second launch (``answer_confirmed_rate`` says how often it did: the
  product's confirmation budget is shared with the launches it confirms mid-search, so a
  winner found late may end unconfirmed). ``confirmed_launches``: the launches to that
  answer where it is a success, else never (inf; null medians in the JSON);
  ``job_launches_median`` (SpecTune): every seed's launches, right answer or not.
- Wilcoxon (exact, two-sided): SpecTune's whole-job launches where its answer is a success,
  else the cap ``budget + confirm_budget + 1``, against the baseline's oracle-stopped
  launches (capped); ``paired_launch_difference_vs_<other>_median`` says which side wins
  (> 0: SpecTune needed more launches).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from bench.hpo._protocol import Config, Observation, Trace, Truth
from bench.hpo._stats import bootstrap_median_ci, median, wilcoxon_signed_rank
from bench.hpo._strategies import (
    _drawing_engine,
    replay_space,
    replay_store,
    run_grid,
    run_optuna,
)
from tuner.candidates import baseline_params
from tuner.surface import ReplayMeasurer, config_key

__all__ = [
    "CONFIRM_BUDGET",
    "CONFIRM_TOP",
    "WholeRun",
    "baseline_whole",
    "confirm_like_product",
    "run_whole",
    "spectune_whole",
]

CONFIRM_TOP, CONFIRM_BUDGET = 2, 4  # the product's defaults (tuner.space MeasurementSpec)


@dataclass(frozen=True)
class WholeRun:
    """One seed of one strategy in whole-job mode."""

    launches: float  # to the confirmed answer (inf: never a success within the budget)
    success: bool  # the final confirmed answer is a success
    search_launches: int
    confirm_launches: int
    confirmed: bool  # the answer has two launches
    extra: dict[str, Any]


@contextlib.contextmanager
def _live_replay() -> Iterator[None]:
    """Let ``tuner.confirm`` relaunch a replayed configuration (bench only, this process)."""
    was = ReplayMeasurer.live
    ReplayMeasurer.live = True  # type: ignore[misc]
    try:
        yield
    finally:
        ReplayMeasurer.live = was  # type: ignore[misc]


def spectune_whole(
    truth: Truth, seed: int, cap: int, *, offline: bool = True
) -> tuple[WholeRun, list[Observation]]:
    """The complete job: ``run_job`` stopping by itself, then its confirmation launches."""
    from tuner.job import create_job, run_job
    from tuner.pareto import job_report

    measurement = {
        **truth.surface.space.measurement.model_dump(mode="json"),
        "confirm_top": CONFIRM_TOP,
        "confirm_budget": CONFIRM_BUDGET,
    }
    rspace = replay_space(
        truth,
        name=f"whole-{seed}",
        seed=seed,
        trials=cap,
        offline_pricing=offline,
        measurement=measurement,
        stop_early=True,
        start_with=[],  # the product's default job has no start points (tiny-cpu.yaml)
    )
    log: list[Observation] = []
    with replay_store("spectune-whole-") as (store, tmp):
        job_id = create_job(store, rspace)
        with _drawing_engine(truth, seed, log), _live_replay():
            run_job(store, job_id, work_dir=tmp / "work")
        job, rep = store.job(job_id), job_report(store, job_id)
        w = rep.winner
        pt = truth.surface.lookup(w.params) if w is not None else None
        key = config_key(pt.config) if pt is not None else None
        success = key is not None and key in truth.success
        extra = {
            "store_engine_launches": job.engine_launches,
            "store_confirm_launches": job.confirm_launches,
            "stop_reason": job.stop_reason,
            "winner": pt.config if pt is not None else None,
            "winner_trial": w.trial_number if w is not None else None,
        }
        confirmed = rep.winner_confirmed
    n = len(log)
    run = WholeRun(
        float(n) if success else math.inf,
        success,
        n - job.confirm_launches,
        job.confirm_launches,
        confirmed,
        extra | {"launches": n},
    )
    return run, log


def confirm_like_product(
    truth: Truth, seed: int, obs: Sequence[Observation]
) -> tuple[Config | None, int, bool]:
    """The confirmation rule (module docstring) after a baseline's search log ``obs``;
    returns (answer, confirmation launches, answer launched twice). Relaunches draw as the
    replay does: the n-th launch of a configuration in the seed."""
    count: Counter[str] = Counter()
    vals: dict[str, list[float]] = defaultdict(list)
    feas: dict[str, list[bool]] = defaultdict(list)
    cfg: dict[str, Config] = {}

    def add(o: Observation) -> None:
        k = config_key(o.config)
        count[k] += 1
        cfg[k] = o.config
        if o.value is not None:
            vals[k].append(o.value)
            feas[k].append(o.feasible)

    for o in obs:
        add(o)

    def ranked() -> list[str]:
        ok = [k for k in vals if vals[k] and 2 * sum(feas[k]) >= len(feas[k])]
        return sorted(ok, key=lambda k: -truth.sign * statistics.geometric_mean(vals[k]))

    base_pt = truth.surface.lookup(baseline_params(truth.surface.space))
    base = config_key(base_pt.config) if base_pt is not None else None
    if base_pt is not None:
        cfg[base] = base_pt.config  # type: ignore[index]
    spent = 0
    while spent < CONFIRM_BUDGET:
        order = ranked()
        want = [k for k in ([base] if base else []) + order[:CONFIRM_TOP] if count[k] < 2]
        if not want:
            break
        add(_relaunch(truth, seed, cfg[want[0]], count[want[0]]))
        spent += 1
    order = ranked()
    if not order:
        return None, spent, False
    best = order[0]
    return cfg[best], spent, count[best] >= 2


def _relaunch(truth: Truth, seed: int, config: Config, nth: int) -> Observation:
    """One more launch of ``config``: its ``nth`` draw (as ``Oracle.query`` draws)."""
    pt = truth.surface.lookup(config)
    if pt is None:
        raise KeyError(f"not on the surface: {config}")
    _, v, ok, wall = truth.observe(pt, seed, nth)
    return Observation(config, v, ok, True, wall)


def baseline_whole(
    truth: Truth, obs: Sequence[Observation], seed: int, spectune_search: int | None
) -> WholeRun:
    """A baseline's search log ``obs``, scored as whole jobs cut after every n launches."""
    first = math.inf
    for n in range(1, len(obs) + 1):
        ans, spent, _ = confirm_like_product(truth, seed, obs[:n])
        if ans is not None and config_key(ans) in truth.success:
            first = float(n + spent)
            break
    extra: dict[str, Any] = {}
    if spectune_search is not None:
        m = min(max(spectune_search, 1), len(obs))
        ans, spent, conf = confirm_like_product(truth, seed, obs[:m])
        extra = {
            "at_spectune_launches": m + spent,
            "success_at_spectune_launches": ans is not None and config_key(ans) in truth.success,
            "confirmed_at_spectune_launches": conf,
        }
    ok = math.isfinite(first)
    return WholeRun(first, ok, len(obs), 0, ok, extra)


def _baseline_search(truth: Truth, name: str, seed: int, own: int) -> list[Observation]:
    if name == "grid":
        return run_grid(truth, seed, own)
    return run_optuna(truth, name, seed, own)


def run_whole(
    truth: Truth, names: Sequence[str], seeds: int, budget: int, gp_budget: int
) -> tuple[dict[str, dict[str, Any]], dict[str, list[Trace]], dict[str, float | None]]:
    """Every strategy on every seed in whole-job mode (SpecTune first: the baselines'
    equal-effort comparison needs its search launches). Returns the per-strategy whole-job
    summary, the anytime traces of the same runs (today's fields) and the Wilcoxon p."""
    order = sorted(
        (n for n in names if n != "random_analytic"), key=lambda n: not n.startswith("spectune")
    )
    spec: list[int | None] = [None] * seeds
    out: dict[str, dict[str, Any]] = {}
    traces: dict[str, list[Trace]] = {}
    runs_by: dict[str, list[WholeRun]] = {}
    for name in order:
        t0 = time.monotonic()
        runs: list[WholeRun] = []
        traces[name] = []
        for s in range(seeds):
            if name.startswith("spectune"):
                r, obs = spectune_whole(truth, s, budget, offline=name == "spectune")
                if name == "spectune":
                    spec[s] = r.search_launches
            else:
                own = min(budget, gp_budget) if name == "gp" else budget
                obs = _baseline_search(truth, name, s, own)
                r = baseline_whole(truth, obs, s, spec[s])
            runs.append(r)
            traces[name].append(Trace.of(obs, truth, budget))
        runs_by[name] = runs
        out[name] = _summary(runs, name.startswith("spectune"))
        out[name]["whole_runtime_s"] = round(time.monotonic() - t0, 1)
        print(f"  {name} (whole job): {out[name]['whole_runtime_s']:.0f} s", file=sys.stderr)
    cap = budget + CONFIRM_BUDGET + 1
    wil: dict[str, float | None] = {}
    for other in ("tpe", "random"):
        if "spectune" in runs_by and other in runs_by:
            x = [min(r.launches, cap) for r in runs_by["spectune"]]
            y = [min(r.launches, cap) for r in runs_by[other]]
            wil[other] = float(f"{wilcoxon_signed_rank(x, y):.3g}")  # 3 significant digits
            # The test is two-sided: the sign says which side (> 0: SpecTune needs more).
            diff = median([a - b for a, b in zip(x, y, strict=True)])
            out["spectune"][f"paired_launch_difference_vs_{other}_median"] = _num(diff)
        else:
            wil[other] = None
    return out, traces, wil


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def _summary(runs: list[WholeRun], own_stop: bool) -> dict[str, Any]:
    """The whole-job fields of one strategy (``confirmed_*``: to a successful answer)."""
    lts = [r.launches for r in runs]
    lo, hi = bootstrap_median_ci(lts)
    n = len(runs)
    out: dict[str, Any] = {
        "confirmed_launches_median": _num(median(lts)),
        "confirmed_launches_ci95": [_num(lo), _num(hi)],
        "confirmed_success_rate": round(sum(r.success for r in runs) / n, 4),
        "answer_confirmed_rate": round(sum(r.confirmed for r in runs) / n, 4),
        "stop": "own stop rule" if own_stop else "oracle stop at the first confirmed success",
    }
    if own_stop:
        out["job_launches_median"] = _num(median([float(r.extra["launches"]) for r in runs]))
        out["search_launches_median"] = _num(median([float(r.search_launches) for r in runs]))
        out["confirm_launches_median"] = _num(median([float(r.confirm_launches) for r in runs]))
        out["per_seed"] = [
            {
                "launches": r.extra["launches"],
                "search": r.search_launches,
                "confirm": r.confirm_launches,
                "store_engine_launches": r.extra["store_engine_launches"],
                "success": r.success,
                "confirmed": r.confirmed,
            }
            for r in runs
        ]
    elif runs and "success_at_spectune_launches" in runs[0].extra:
        out["success_at_spectune_launches_rate"] = round(
            sum(r.extra["success_at_spectune_launches"] for r in runs) / n, 4
        )
        out["launches_at_spectune_launches_median"] = _num(
            median([float(r.extra["at_spectune_launches"]) for r in runs])
        )
    return out
