"""The strategies compared, each turned into a list of Observations on the same oracle.

Why one oracle: every strategy's n-th query of a configuration in seed s gets the same
recorded repeat (``draw_index``), so paired seeds compare searches, not draws.

Launches are counted as follows: every Optuna baseline trial and every grid step is a new
engine launch (plain Optuna re-measures a configuration it suggests again, with a new draw);
SpecTune's study reuses an earlier measurement of the same configuration without a launch
(``reused_from``), which costs a trial but neither a launch nor a draw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna

from bench.hpo._protocol import Config, Observation, Oracle, Truth
from tuner.methods import METHODS
from tuner.space import IntRange, SearchSpace, parse_space
from tuner.surface import _replay, config_key, params_to_config

__all__ = ["SAMPLERS", "replay_space", "replay_store", "run_grid", "run_optuna", "run_spectune"]


def _one_repeat(recorded: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """A stored measurement as if the launch had measured only the drawn repeat: its values
    at top level, a one-run ``stats``/``score``, never noisy."""
    m = dict(recorded)
    stats = {}
    for k, v in run.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            m[k] = v
            stats[k] = {"median": v, "mad": 0.0, "ci95_low": v, "ci95_high": v, "n": 1}
    m["stats"] = {**(recorded.get("stats") or {}), **stats}
    m["score"] = {k: run.get(k, recorded.get(k)) for k in (recorded.get("score") or {})}
    m.update(runs=[run], repeats=1, relative_mad=0.0, noisy=False)
    return m


@contextlib.contextmanager
def _drawing_engine(truth: Truth, seed: int, log: list[Observation]) -> Iterator[None]:
    """Make the product's replay engine answer each launch with a drawn repeat, and log it.

    Patches ``ReplayEngine.measure`` in this process only; the product code path (run_job,
    its study, reuse, pruning, confirmation) is untouched."""
    original = _replay.ReplayEngine.measure
    count: dict[str, int] = {}

    def measure(self: Any, config: Config, levels: list[tuple[str, int]]) -> Any:
        pt = self.surface.lookup(config)
        key = config_key(config)
        nth = count.get(key, 0)
        count[key] = nth + 1
        if pt is None or pt.state != "complete":
            log.append(Observation(config, None, False, True, truth.fail_wall_s))
            return original(self, config, levels)  # raises the recorded failure
        drawn, v, ok, wall = truth.observe(pt, seed, nth)
        log.append(Observation(config, v, ok, True, wall))
        got = original(self, config, levels)
        if truth.whole_launches:  # the drawn launch holds every recorded key; the replay
            # engine's own point adds only its marker, which the overlay keeps
            points = [
                {**m, **drawn[lvl]} if lvl in drawn else m
                for m, lvl in zip(got.points, levels, strict=True)
            ]
        else:
            points = [
                _one_repeat(m, drawn.get(lvl, {}))
                for m, lvl in zip(got.points, levels, strict=True)
            ]
        return dataclasses.replace(got, points=points)

    _replay.ReplayEngine.measure = measure  # type: ignore[method-assign]
    try:
        yield
    finally:
        _replay.ReplayEngine.measure = original  # type: ignore[method-assign]


def replay_space(truth: Truth, *, name: str, **fields: Any) -> SearchSpace:
    """The surface's own space on the replay engine, with ``fields`` set (seed, trials,
    offline_pricing, measurement, ...). The search is the product's default (guided) unless
    ``fields`` say otherwise: a surface is recorded with ``search: sampler`` (every
    configuration as written), which is how it was measured, not how SpecTune searches."""
    space = truth.surface.space
    data = space.model_dump(mode="json")
    data["engine"] = {
        **data["engine"],
        "kind": "replay",
        "surface": str(truth.surface.path.resolve()),
    }
    data.update(name=f"{space.name}-{name}", search="guided")
    data.update(fields)
    return parse_space(data, base_dir=space.base_dir)


@contextlib.contextmanager
def replay_store(prefix: str) -> Iterator[tuple[Any, Path]]:
    """(a ``Store`` on a throw-away SQLite, its folder): on tmpfs where there is one, since
    fsyncs dominate the replay time; SpecTune's logger quietened for the benchmark."""
    from tuner.storage import Store

    logging.getLogger("tuner").setLevel(logging.ERROR)
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix=prefix, dir=shm if shm.is_dir() else None) as tmp:
        yield Store(f"sqlite:///{Path(tmp) / 'job.db'}"), Path(tmp)


def run_spectune(
    truth: Truth, seed: int, budget: int, *, offline: bool = True
) -> list[Observation]:
    """SpecTune's own study through ``run_job`` with ``engine.kind: replay``; ``offline``:
    with the surface's offline acceptance table (``offline_pricing``), else without."""
    from tuner.job import create_job, run_job

    # The product's trial budget counts reuses too, so it may launch fewer than ``budget``.
    rspace = replay_space(
        truth, name=f"hpo-{seed}", seed=seed, trials=budget, offline_pricing=offline
    )
    log: list[Observation] = []
    with replay_store("spectune-hpo-") as (store, tmp):
        job_id = create_job(store, rspace)
        with _drawing_engine(truth, seed, log):
            run_job(store, job_id, work_dir=tmp / "work")
    return log


def _flat_space(space: SearchSpace) -> Callable[[optuna.Trial], Config]:
    """Every parameter of every method sampled on every trial (a flat space: what a plain
    Optuna user writes; multivariate TPE and the GP need one fixed set of dimensions)."""
    methods = ["none", *space.methods.enabled()]

    def suggest(trial: optuna.Trial) -> Config:
        method = trial.suggest_categorical("method", methods)
        p: dict[str, Any] = {"method": method}
        for name in methods[1:]:
            m, spec = METHODS[name], getattr(space.methods, name)
            for prm in m.active(spec):
                src = getattr(spec, prm.source)
                key = m.optuna_name(prm)
                if isinstance(src, IntRange):
                    v = trial.suggest_int(key, src.min, src.max)
                else:
                    v = trial.suggest_categorical(key, list(src))
                if name == method:
                    p[key] = v
        p["max_num_seqs"] = trial.suggest_categorical("max_num_seqs", space.max_num_seqs)
        p["memory_fraction"] = trial.suggest_categorical("memory_fraction", space.memory_fraction)
        return params_to_config(p, space)

    return suggest


SAMPLERS: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
    # Optuna 5's default TPE is already multivariate for one objective, so ``tpe`` and
    # ``tpe_mv`` draw the same trials; ``tpe_indep`` is the independent TPE (Optuna <= 4).
    "tpe": lambda s: optuna.samplers.TPESampler(seed=s),
    "tpe_mv": lambda s: optuna.samplers.TPESampler(seed=s, multivariate=True),
    "tpe_indep": lambda s: optuna.samplers.TPESampler(seed=s, multivariate=False),
    "gp": lambda s: optuna.samplers.GPSampler(seed=s),
    "random": lambda s: optuna.samplers.RandomSampler(seed=s),
}


def run_optuna(truth: Truth, name: str, seed: int, budget: int) -> list[Observation]:
    """A plain single-objective Optuna study (first objective; SLO as a constraint) on the
    flat space; a failed engine reports the worst value and an infeasible constraint."""
    oracle = Oracle(truth, seed)
    suggest = _flat_space(truth.surface.space)
    worst = 0.0 if truth.direction == "maximize" else 1e12

    def objective(trial: optuna.Trial) -> float:
        ob = oracle.query(suggest(trial))
        trial.set_constraint("slo", 0.0 if ob.feasible else 1.0)  # read by TPE and the GP
        return worst if ob.value is None else ob.value

    study = optuna.create_study(direction=truth.direction, sampler=SAMPLERS[name](seed))
    study.optimize(objective, n_trials=budget)
    return oracle.log


def run_grid(truth: Truth, seed: int, budget: int) -> list[Observation]:
    """The full sweep in its canonical order (``grid_configs``), cut at the budget."""
    oracle = Oracle(truth, seed)
    for c in truth.grid[:budget]:
        oracle.query(c)
    return oracle.log
