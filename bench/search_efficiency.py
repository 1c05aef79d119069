"""How many engine launches does each search strategy need? The HPO-benchmark protocol.

    .venv/bin/python bench/search_efficiency.py --surface bench/surfaces/tiny-cpu.jsonl \
        [--seeds 30] [--budget N] [--strategies spectune,tpe,...] [--plot docs/x.png]

Protocol (HPOBench / YAHPO Gym / Ax "inference trace" style), on a recorded surface:

- a query replays ONE recorded repeat of the configuration, drawn at random; asking again
  draws again (``bench.hpo._protocol.draw_index``: a hash of seed, configuration, query
  number and level, so paired seeds see the same draws);
- after n engine launches a strategy is scored by the TRUE value (mean of all recorded
  repeats at the objective point) of the configuration it would RECOMMEND: the best feasible
  observation of the first objective (SpecTune's own winner rule for one objective);
  feasibility of the truth is judged on the repeats' means of the SLO metrics;
- success: the recommendation is feasible and within 3 % of the best true value, or tied
  with the best by a two-sided Welch t-test on the recorded repeats at p >= 0.05;
- cost: engine launches (Optuna baselines and the grid launch on every query, a repeated
  suggestion included; SpecTune reuses a configuration's earlier measurement without a
  launch), and simulated wall time = recorded start-up + the drawn repeats' durations;
- paired seeds (default 30); medians with 95 % bootstrap intervals; a seed that never
  succeeds within the budget counts as budget + 1 in the exact two-sided Wilcoxon
  signed-rank test (SpecTune vs TPE, vs random) and makes the median infinite (null) when
  it is the majority.

Strategies: ``spectune`` (the product's study via ``run_job`` with ``engine.kind: replay``,
offline pricing from the surface's ``offline_acceptance`` table), ``spectune_nooffline``
(the same without it: every proposer scanned by a launch, in the prior order of methods),
``tpe`` (Optuna TPE, default settings + the SLO as constraint), ``tpe_mv`` (multivariate TPE:
the same trials as ``tpe`` under Optuna 5, whose default is multivariate for one objective),
``tpe_indep`` (independent TPE, the Optuna <= 4 default),
``gp`` (Optuna GPSampler), ``random`` (Optuna RandomSampler), ``random_analytic`` (uniform
sampling without replacement with a noise-free oracle: closed form) and ``grid`` (the sweep in
canonical order). The last line printed is one JSON object.

``--whole-job`` replays complete jobs (``bench/hpo/_whole.py`` says how): SpecTune's job stops
by itself and confirms its winner (``confirm_top`` 2, ``confirm_budget`` 4, the product
defaults), every launch counted; the baselines, which have no stop rule, get an oracle stop
under the same confirmation rule. The JSON gains ``strategies.<name>.confirmed_launches_median``,
``confirmed_success_rate`` (and more) and ``whole_job`` (the rules, the whole-job Wilcoxon
p); today's fields then come from the same runs (SpecTune's log ends at its own stop).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.hpo when run as a file

from bench.hpo._plot import anytime_plot  # noqa: E402
from bench.hpo._protocol import Trace, Truth, analytic_random  # noqa: E402
from bench.hpo._stats import bootstrap_median_ci, median, wilcoxon_signed_rank  # noqa: E402
from bench.hpo._strategies import run_grid, run_optuna, run_spectune  # noqa: E402
from bench.hpo._whole import CONFIRM_BUDGET, CONFIRM_TOP, run_whole  # noqa: E402
from tuner.surface import config_key, read_surface  # noqa: E402

ALL = [
    "spectune",
    "spectune_nooffline",
    "tpe",
    "tpe_mv",
    "tpe_indep",
    "gp",
    "random",
    "random_analytic",
    "grid",
]


def _num(x: float) -> float | None:
    """JSON-safe: an infinite or undefined number is null (never reached within the budget)."""
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def _default_plot(surface: Path) -> Path:
    """docs/search-anytime-<name>.png for the repository's surfaces; beside any other file
    (a test's temporary surface must not write into docs/)."""
    repo = Path(__file__).resolve().parents[1]
    if surface.resolve().parent == repo / "bench" / "surfaces":
        return repo / "docs" / f"search-anytime-{surface.stem}.png"
    return surface.with_name(f"{surface.stem}-anytime.png")


def run_strategy(name: str, truth: Truth, seed: int, own: int, budget: int) -> Trace:
    """One seeded run with ``own`` launches, scored over ``budget`` (the rest carried)."""
    if name in ("spectune", "spectune_nooffline"):
        obs = run_spectune(truth, seed, budget, offline=name == "spectune")
    elif name == "grid":
        obs = run_grid(truth, seed, budget)
    else:
        obs = run_optuna(truth, name, seed, own)
    return Trace.of(obs, truth, budget)


def summarize(traces: list[Trace], budget: int) -> dict[str, Any]:
    lts = [t.launches_to_success() for t in traces]
    lo, hi = bootstrap_median_ci(lts)
    return {
        "launches_to_success_median": _num(median(lts)),
        "launches_to_success_ci95": [_num(lo), _num(hi)],
        "success_rate": round(sum(math.isfinite(x) for x in lts) / len(lts), 4),
        "regret_at_10_launches_median": _num(
            median([t.regret[min(10, budget) - 1] for t in traces])
        ),
        "wall_h_to_success_median": _num(median([t.wall_to_success() for t in traces]) / 3600),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--surface", required=True, type=Path)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--budget", type=int, default=None, help="launches (default min(2N, 120))")
    ap.add_argument(
        "--gp-budget",
        type=int,
        default=30,
        help="launches the GP may use (its cost grows cubically; it keeps its last "
        "recommendation after that)",
    )
    ap.add_argument("--within", type=float, default=0.03)
    ap.add_argument(
        "--launch-noise",
        type=float,
        default=0.0,
        help="a stated launch-noise model: each launch's speed times exp(N(0, SD)) on top of "
        "the recorded repeat it draws (log sd; this 2-core host's relaunches: 0.06-0.2)",
    )
    ap.add_argument(
        "--whole-launches",
        action="store_true",
        help="a launch answers with the recorded launch's repeats and their interval (as a "
        "real launch with measurement.repeats), all moved by its launch factor; needs "
        "--launch-noise",
    )
    ap.add_argument("--alpha", type=float, default=0.05, help="Welch tie test level")
    ap.add_argument("--strategies", default=",".join(ALL))
    ap.add_argument(
        "--plot", type=Path, default=None, help="default docs/search-anytime-<surface>.png"
    )
    ap.add_argument(
        "--whole-job",
        action="store_true",
        help="replay complete jobs: SpecTune's own stop rule and confirmation launches, the "
        "baselines under the same confirmation rule (bench/hpo/_whole.py)",
    )
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("tuner").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat")
    names = [s for s in args.strategies.split(",") if s]
    unknown = set(names) - set(ALL)
    if unknown:
        ap.error(f"unknown strategies {sorted(unknown)}; known: {ALL}")

    surface = read_surface(args.surface)
    truth = Truth(surface, args.within, args.alpha, args.launch_noise, args.whole_launches)
    n = len(truth.grid)
    budget = args.budget or min(2 * n, 120)
    simulated = surface.simulated
    print(
        f"surface {args.surface}: {n} configurations"
        + (" (SIMULATED, not measurements)" if simulated else " (recorded measurements)")
    )
    print(
        f"best true {truth.metric}: {truth.best:.2f} ({truth.direction}); success set: "
        f"{len(truth.success)} of {n} (within {args.within:.0%} or Welch p >= {args.alpha}); "
        f"budget {budget} launches; {args.seeds} paired seeds"
    )
    results: dict[str, dict[str, Any]] = {}
    lts_by: dict[str, list[float]] = {}
    curves: dict[str, list[list[float]]] = {}
    t_all = time.monotonic()
    whole: dict[str, dict[str, Any]] = {}
    wil_whole: dict[str, float | None] = {}
    whole_traces: dict[str, list[Trace]] = {}
    if args.whole_job:
        whole, whole_traces, wil_whole = run_whole(
            truth, names, args.seeds, budget, args.gp_budget
        )
    for name in names:
        if args.whole_job and name in whole_traces:
            traces = whole_traces[name]  # today's fields from the same whole-job runs
            results[name] = summarize(traces, budget) | whole[name]
            lts_by[name] = [t.launches_to_success() for t in traces]
            curves[name] = [t.regret for t in traces]
            continue
        if name == "random_analytic":
            continue
        t0 = time.monotonic()
        own = min(budget, args.gp_budget) if name == "gp" else budget
        traces = [run_strategy(name, truth, s, own, budget) for s in range(args.seeds)]
        results[name] = summarize(traces, budget)
        results[name]["launch_budget"] = own
        results[name]["runtime_s"] = round(time.monotonic() - t0, 1)
        lts_by[name] = [t.launches_to_success() for t in traces]
        curves[name] = [t.regret for t in traces]
        print(f"  {name}: {results[name]['runtime_s']:.0f} s", file=sys.stderr)
    analytic = None
    if "random_analytic" in names:
        a = analytic_random(n, len(truth.success), budget, [truth.regret(c) for c in truth.grid])
        analytic = a["regret_curve"]
        results["random_analytic"] = {
            "launches_to_success_median": a["median"],
            "launches_to_success_ci95": [a["q025"], a["q975"]],  # quantiles of T, not of a median
            "success_rate": round(a["success_by_budget"], 4),
            "regret_at_10_launches_median": _num(a["regret_at_10_median"]),
            "launches_expected": round(a["expected"], 3),
        }
    results = {k: results[k] for k in names if k in results}

    wil: dict[str, float | None] = {}
    for other in ("tpe", "random"):
        if "spectune" in lts_by and other in lts_by:
            cap = budget + 1
            x = [min(v, cap) for v in lts_by["spectune"]]
            y = [min(v, cap) for v in lts_by[other]]
            wil[other] = round(wilcoxon_signed_rank(x, y), 6)
        else:
            wil[other] = None

    print()
    print(
        f"{'strategy':<16} {'to success (median, 95% CI)':>30} {'success':>8} "
        f"{'regret@10':>10} {'wall h':>8}"
    )
    for name, r in results.items():
        lo, hi = r["launches_to_success_ci95"]
        med = r["launches_to_success_median"]
        cell = f"{'-' if med is None else f'{med:g}'} [{lo}, {hi}]"
        wall = r.get("wall_h_to_success_median")
        print(
            f"{name:<16} {cell:>30} {r['success_rate']:>8.2f} "
            f"{r['regret_at_10_launches_median'] or 0:>10.4f} "
            f"{'-' if wall is None else f'{wall:.2f}':>8}"
        )
    print(
        f"Wilcoxon signed-rank (exact, two-sided) spectune vs tpe p={wil['tpe']}, vs random "
        f"p={wil['random']}; total {time.monotonic() - t_all:.0f} s"
    )
    plot = args.plot or _default_plot(args.surface)
    if curves:
        anytime_plot(
            curves,
            analytic,
            f"{args.surface.name}{' (simulated)' if simulated else ''}: {n} configs, "
            f"{args.seeds} seeds",
            plot,
        )
        print(f"anytime plot: {plot}")
    if args.whole_job:
        print(
            f"\nwhole job (confirm_top {CONFIRM_TOP}, confirm_budget {CONFIRM_BUDGET}): "
            f"{'strategy':<16} {'launches to confirmed success':>30} {'success':>8}"
        )
        for name, r in whole.items():
            med = r["confirmed_launches_median"]
            print(
                f"{name:<16} {'-' if med is None else f'{med:g}':>30} "
                f"{r['confirmed_success_rate']:>8.2f}  ({r['stop']})"
            )
        d = whole.get("spectune", {})
        print(
            f"Wilcoxon (whole job) vs tpe p={wil_whole['tpe']}, vs random "
            f"p={wil_whole['random']}; median paired difference (spectune - other, > 0: "
            f"spectune needs more): tpe {d.get('paired_launch_difference_vs_tpe_median')}, "
            f"random {d.get('paired_launch_difference_vs_random_median')}"
        )
    best_cfg = next(c for c in truth.grid if config_key(c) == truth.best_key)
    print(f"best configuration: {best_cfg}")
    final = {
        "surface": str(args.surface),
        "simulated": simulated,
        "configurations": n,
        "seeds": args.seeds,
        "budget_launches": budget,
        "launch_noise_log_sd": args.launch_noise,
        "whole_launches": args.whole_launches,
        "strategies": results,
        "wilcoxon_p": wil,
    }
    if args.whole_job:
        final["whole_job"] = {
            "confirm_top": CONFIRM_TOP,
            "confirm_budget": CONFIRM_BUDGET,
            "spectune": "run_job with its own stop rule (trials = budget as a cap) and its "
            "confirmation launches; launches = search launches + confirmation launches",
            "baselines": "oracle stop: fewest search launches n + the same confirmation rule's "
            "launches whose confirmed answer is a success (bench/hpo/_whole.py)",
            "relaunch": (
                "the recorded launch (every repeat, their interval)"
                if args.whole_launches
                else "a new draw among the configuration's recorded repeats"
            )
            + (
                f", its speed times exp(N(0, {args.launch_noise:g})) (stated launch noise)"
                if args.launch_noise > 0
                else ""
            ),
            "wilcoxon_p": wil_whole,
        }
    print(json.dumps(final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
