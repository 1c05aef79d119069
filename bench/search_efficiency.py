"""How many engine launches does each search strategy need? Measured on a recorded surface.

    .venv/bin/python bench/search_efficiency.py --surface bench/surfaces/tiny-cpu.jsonl \
        [--seeds 20]

Every strategy is answered from the same surface (real vLLM measurements recorded by
bench/record_surface.py), so the only thing compared is the search:

- ``spectune``: SpecTune's own study, through ``run_job`` with ``engine.kind: replay`` (the same
  code path `make demo` runs: conditional space, baseline and known-good points first, engine
  reuse, pruning), settings from the surface's space;
- ``tpe``: plain Optuna TPE (default settings, same objectives and SLO constraints) on a flat
  space where every parameter is always sampled;
- ``random``: Optuna's random sampler on that flat space;
- ``grid``: the full sweep in its canonical order. A sweep only knows its answer after its last
  launch, so its trials to the answer are the grid size.

Reported per strategy: median trials and engine launches to first measure a configuration
within 3% of the best SLO-feasible value of the first objective (by default the noise-aware
score SpecTune's study optimises, the median moved against it by its MAD; ``--value median``
uses plain medians; a repeat of a configuration already measured in the same run is a trial
but not a launch), and the Pareto hypervolume of
the feasible points found in the first 25% of the grid's trial count, relative to the grid's.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna

from tuner.job import create_job, run_job
from tuner.pareto import feasible
from tuner.space import SearchSpace, parse_space
from tuner.storage import Store
from tuner.surface import Surface, config_key, grid_configs, params_to_config, read_surface

Config = dict[str, Any]


class Truth:
    """The surface's verdict on a configuration: feasible, objective values."""

    def __init__(self, surface: Surface, space: SearchSpace, value: str = "score") -> None:
        self.surface, self.space, self.value = surface, space, value
        self.level = (space.primary_workload, space.primary_concurrency)
        self.objectives = [(o.metric, o.resolved_direction) for o in space.objectives]
        self.slo = space.slo.limits()
        self.min_match = space.lossless.min_match_rate if space.lossless.enabled else None
        self.grid = grid_configs(space)
        missing = [c for c in self.grid if surface.lookup(c) is None]
        if missing:
            raise SystemExit(
                f"the surface lacks {len(missing)} of the {len(self.grid)} grid configurations "
                f"(first: {missing[0]}); record them with bench/record_surface.py"
            )
        self._cache: dict[str, tuple[bool, list[float] | None]] = {}
        vals = [self.values(c) for c in self.grid]
        feas = [v for ok, v in vals if ok and v is not None]
        if not feas:
            raise SystemExit("no configuration on the surface is feasible under its SLO")
        name, direction = self.objectives[0]
        firsts = [v[0] for v in feas]
        self.best = max(firsts) if direction == "maximize" else min(firsts)
        self.direction = direction
        best_c = next(
            c
            for c, (ok, v) in zip(self.grid, vals, strict=True)
            if ok and v is not None and v[0] == self.best
        )
        self.best_interval = self._interval(best_c)

    def _interval(self, c: Config) -> tuple[float, float] | None:
        """95% interval of the first objective at the objective level (repeats' t-interval)."""
        pt = self.surface.lookup(c)
        if pt is None or self.level not in pt.measurements:
            return None
        st = (pt.measurements[self.level].get("stats") or {}).get(self.objectives[0][0])
        if not st or st.get("ci95_low") is None:
            return None
        return float(st["ci95_low"]), float(st["ci95_high"])

    def tied(self, c: Config, _within: float = 0.0) -> bool:
        """Feasible and statistically tied with the best: its 95% interval reaches the best
        point's. (What repeats on a noisy machine can tell apart; the 3% rule cannot.)"""
        ok, v = self.values(c)
        iv, b = self._interval(c), self.best_interval
        if not ok or v is None or iv is None or b is None:
            return False
        return iv[1] >= b[0] if self.direction == "maximize" else iv[0] <= b[1]

    def values(self, c: Config) -> tuple[bool, list[float] | None]:
        key = config_key(c)
        if key not in self._cache:
            pt = self.surface.lookup(c)
            if pt is None or pt.state != "complete" or self.level not in pt.measurements:
                self._cache[key] = (False, None)
            else:
                m = pt.measurements[self.level]
                ok, _ = feasible(
                    m,
                    self.slo,
                    lossless_match_rate=pt.lossless_match_rate,
                    min_match_rate=self.min_match,
                )
                # "score": what SpecTune's study optimises and ranks the winner by (the median
                # moved against us by its MAD); "median": the plain median of the repeats.
                src = (m.get("score") or {}) if self.value == "score" else {}
                v = [src.get(name, m.get(name)) for name, _ in self.objectives]
                self._cache[key] = (
                    ok,
                    None if any(x is None for x in v) else [float(x) for x in v],
                )
        return self._cache[key]

    def good_enough(self, c: Config, within: float) -> bool:
        ok, v = self.values(c)
        if not ok or v is None:
            return False
        if self.direction == "maximize":
            return v[0] >= self.best * (1 - within)
        return v[0] <= self.best * (1 + within)

    def hypervolume(self, configs: Sequence[Config]) -> float:
        """2-D hypervolume of the feasible points (first two objectives), both turned into
        minimisation; reference: 0 for a maximised metric, the SLO limit (or 1.1x the grid's
        worst) for a minimised one."""
        objs = self.objectives[:2]
        pts = []
        for c in {config_key(c): c for c in configs}.values():
            ok, v = self.values(c)
            if ok and v is not None:
                pairs = zip(v[:2], objs, strict=True)
                pts.append([(-x if d == "maximize" else x) for x, (_, d) in pairs])
        if not pts:
            return 0.0
        ref = []
        for i, (name, d) in enumerate(objs):
            if d == "maximize":
                ref.append(0.0)
            else:
                worst = max(v[i] for ok, v in map(self.values, self.grid) if ok and v)
                ref.append(self.slo.get(name, worst * 1.1))
        if len(objs) == 1:
            return max(0.0, ref[0] - min(p[0] for p in pts))
        pts.sort()
        hv, best_y = 0.0, ref[1]
        for x, y in pts:
            if y < best_y and x < ref[0]:
                hv += (ref[0] - x) * (best_y - y)
                best_y = y
        return hv


def _reach(
    seq: Sequence[tuple[Config, bool]],
    truth: Truth,
    within: float,
    good: Callable[[Config, float], bool] | None = None,
) -> tuple[int, int]:
    """(trials, launches) up to and including the first good-enough configuration; a seen
    configuration costs a trial, not a launch. (inf, inf) when never reached."""
    good = good or truth.good_enough
    seen: set[str] = set()
    for i, (c, launched) in enumerate(seq, 1):
        if launched:
            seen.add(config_key(c))
        if good(c, within):
            return i, len(seen)
    return math.inf, math.inf  # type: ignore[return-value]


# --------------------------------------------------------------------------- strategies


def run_spectune(
    surface: Surface, space: SearchSpace, seed: int, budget: int, db_dir: Path
) -> list[tuple[Config, bool]]:
    """SpecTune's real study on the replay backend; returns (config, launched) per trial."""
    data = space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(surface.path.resolve())}
    data["seed"] = seed
    data["trials"] = budget
    data["name"] = f"{space.name}-replay-{seed}"
    rspace = parse_space(data, base_dir=space.base_dir)
    url = f"sqlite:///{db_dir / f'seed-{seed}.db'}"
    store = Store(url)
    job_id = create_job(store, rspace)
    run_job(store, job_id, work_dir=db_dir / "work")
    out = []
    for r in (rec.flat() for rec in store.trial_records(job_id)):
        if r["state"] in ("complete", "fail", "pruned"):
            launched = r["reused_from"] is None and r["fail_reason"] not in ("invalid_config",)
            out.append((r["params"], launched))
    return out


def _flat_objective(truth: Truth, space: SearchSpace) -> Callable[[optuna.Trial], list[float]]:
    methods = ["none", *space.methods.enabled()]
    ng, dm = space.methods.ngram, space.methods.draft_model

    def objective(trial: optuna.Trial) -> list[float]:
        p: dict[str, Any] = {"method": trial.suggest_categorical("method", methods)}
        if ng is not None:
            p["ngram.num_speculative_tokens"] = trial.suggest_int(
                "ngram_k", ng.num_speculative_tokens.min, ng.num_speculative_tokens.max
            )
            p["ngram.prompt_lookup_min"] = trial.suggest_int(
                "lookup_min", ng.prompt_lookup_min.min, ng.prompt_lookup_min.max
            )
            p["ngram.prompt_lookup_max"] = trial.suggest_int(
                "lookup_max", ng.prompt_lookup_max.min, ng.prompt_lookup_max.max
            )
        if dm is not None:
            p["draft_model.num_speculative_tokens"] = trial.suggest_int(
                "draft_k", dm.num_speculative_tokens.min, dm.num_speculative_tokens.max
            )
            p["draft_model.draft"] = trial.suggest_categorical("draft", dm.drafts)
        p["max_num_seqs"] = trial.suggest_categorical("max_num_seqs", space.max_num_seqs)
        p["memory_fraction"] = trial.suggest_categorical("memory_fraction", space.memory_fraction)
        c = params_to_config(p, space)
        trial.set_user_attr("config", c)
        ok, v = truth.values(c)
        pt = truth.surface.lookup(c)
        if v is None or pt is None or pt.state != "complete":
            raise optuna.TrialPruned()  # an engine that failed: no values to report
        trial.set_constraint("slo", 0.0 if ok else 1.0)
        return v

    return objective


def run_flat(
    truth: Truth, space: SearchSpace, sampler: optuna.samplers.BaseSampler, budget: int
) -> list[tuple[Config, bool]]:
    directions = [d for _, d in truth.objectives]
    study = optuna.create_study(directions=directions, sampler=sampler)
    study.optimize(_flat_objective(truth, space), n_trials=budget)
    return [(t.user_attrs["config"], True) for t in study.trials if "config" in t.user_attrs]


# --------------------------------------------------------------------------- main


def summarize(
    name: str,
    runs: list[list[tuple[Config, bool]]],
    truth: Truth,
    within: float,
    hv_trials: int,
    grid_hv: float,
    grid_n: int,
) -> dict[str, Any]:
    reach = [_reach(r, truth, within) for r in runs]
    trials = [t for t, _ in reach]
    launches = [n for _, n in reach]
    hvs = [truth.hypervolume([c for c, _ in r[:hv_trials]]) / grid_hv for r in runs]
    tied = [_reach(r, truth, within, truth.tied)[0] for r in runs]
    return {
        "median_trials_to_tie": statistics.median(tied),
        "strategy": name,
        "seeds": len(runs),
        "reached": sum(math.isfinite(t) for t in trials),
        "median_trials": statistics.median(trials),
        "median_launches": statistics.median(launches),
        "trials_ratio": statistics.median(trials) / grid_n,
        "hv_at_25pct": statistics.median(hvs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--surface", required=True, type=Path)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--within", type=float, default=0.03, help="relative distance to the best")
    ap.add_argument("--hv-fraction", type=float, default=0.25)
    ap.add_argument(
        "--value",
        choices=["score", "median"],
        default="score",
        help="objective value of a point: the noise-aware score the study ranks by "
        "(default) or the plain median of its repeats",
    )
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("tuner").setLevel(logging.ERROR)
    surface = read_surface(args.surface)
    space = surface.space
    truth = Truth(surface, space, args.value)
    n = len(truth.grid)
    hv_trials = max(1, math.ceil(args.hv_fraction * n))
    grid_hv = truth.hypervolume(truth.grid)
    name, direction = truth.objectives[0]
    print(
        f"surface {args.surface}: {n} configurations, recorded "
        f"{surface.header['recorded'].get('at', '?')} "
        f"({surface.header['recorded'].get('engine', 'engine ?')})"
    )
    print(
        f"objective value: {args.value}; best SLO-feasible {name} at concurrency "
        f"{space.primary_concurrency}: "
        f"{truth.best:.2f} ({direction}); target within {args.within:.0%}; "
        f"{sum(truth.good_enough(c, args.within) for c in truth.grid)} of {n} configurations "
        f"qualify; hypervolume measured after {hv_trials} trials"
    )
    ranked = sorted(
        (
            (truth.values(c)[1][0], c)
            for c in truth.grid
            if truth.values(c)[0] and truth.values(c)[1]
        ),
        key=lambda x: -x[0] if direction == "maximize" else x[0],
    )
    n_tied = sum(truth.tied(c) for c in truth.grid)
    print(
        f"top configurations by {name} (the within-{args.within:.0%} set is marked *, the "
        f"{n_tied} tied with the best by 95% intervals +):"
    )
    for v, c in ranked[:8]:
        mark = ("*" if truth.good_enough(c, args.within) else " ") + (
            "+" if truth.tied(c) else " "
        )
        desc = ", ".join(f"{k}={x}" for k, x in c.items() if k != "memory_fraction")
        print(f"  {mark} {v:8.2f}  {desc}")
    cap = 2 * n
    results = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spectune-bench-") as tmp:
        runs = []
        for seed in range(args.seeds):
            budget = hv_trials
            seq = run_spectune(surface, space, seed, budget, Path(tmp))
            if not math.isfinite(_reach(seq, truth, args.within)[0]):
                seq = _extend_spectune(surface, space, seed, cap, Path(tmp))
            runs.append(seq)
        results.append(summarize("spectune", runs, truth, args.within, hv_trials, grid_hv, n))
    t_spec = time.monotonic() - t0
    for label, make in (
        ("tpe", lambda s: optuna.samplers.TPESampler(seed=s)),
        ("random", lambda s: optuna.samplers.RandomSampler(seed=s)),
    ):
        runs = []
        for seed in range(args.seeds):
            runs.append(run_flat(truth, space, make(seed), budget=cap))
        results.append(summarize(label, runs, truth, args.within, hv_trials, grid_hv, n))
    sweep = [(c, True) for c in truth.grid]
    g = summarize("grid", [sweep], truth, args.within, hv_trials, grid_hv, n)
    first_hit = g["median_trials"]
    g.update(median_trials=n, median_launches=n, trials_ratio=1.0, median_trials_to_tie=n)
    results.append(g)

    print()
    print(
        f"{'strategy':<10} {'seeds':>5} {'reached':>7} {'trials to 3%':>13} "
        f"{'launches':>9} {'of grid':>8} {'HV@25%':>7} {'trials to tie':>14}"
    )
    for r in results:
        print(
            f"{r['strategy']:<10} {r['seeds']:>5} {r['reached']:>7} "
            f"{r['median_trials']:>13g} {r['median_launches']:>9g} "
            f"{r['trials_ratio']:>8.3f} {r['hv_at_25pct']:>7.3f} "
            f"{r['median_trials_to_tie']:>14g}"
        )
    print(
        f"(grid: a sweep knows its answer after all {n} launches; in sweep order the first "
        f"qualifying configuration is number {first_hit:g}. SpecTune's {args.seeds} studies "
        f"took {t_spec:.0f} s of replay.)"
    )
    by = {r["strategy"]: r for r in results}
    final = {
        "spectune_trials_ratio": round(by["spectune"]["trials_ratio"], 4),
        "tpe_trials_ratio": round(by["tpe"]["trials_ratio"], 4),
        "random_trials_ratio": round(by["random"]["trials_ratio"], 4),
        "spectune_hv_at_25pct": round(by["spectune"]["hv_at_25pct"], 4),
        "spectune_launches_ratio": round(by["spectune"]["median_launches"] / n, 4),
        # Extra (not the criterion): trials to a point tied with the best by intervals.
        "spectune_tied_ratio": round(by["spectune"]["median_trials_to_tie"] / n, 4),
        "tpe_tied_ratio": round(by["tpe"]["median_trials_to_tie"] / n, 4),
        "random_tied_ratio": round(by["random"]["median_trials_to_tie"] / n, 4),
        "grid_size": n,
        "seeds": args.seeds,
    }
    print(json.dumps(final))
    return 0


def _extend_spectune(
    surface: Surface, space: SearchSpace, seed: int, cap: int, tmp: Path
) -> list[tuple[Config, bool]]:
    """Not reached within the first budget: the same seed again with the full budget."""
    d = tmp / f"long-{seed}"
    d.mkdir(parents=True, exist_ok=True)
    return run_spectune(surface, space, seed, cap, d)


if __name__ == "__main__":
    sys.exit(main())
