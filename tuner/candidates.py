"""What a candidate is: sampled, enumerated as a grid, or named (baseline, start points), and
the engine configuration it launches.

A candidate exists in two spellings. Optuna's parameters are namespaced and define-by-run
(``ngram.prompt_lookup_min`` exists only when the method is ngram); a trial's ``params`` are
plain (``{"method": "ngram", "prompt_lookup_min": 1, …}``) and are what a surface keys on.
``sample_candidate`` turns the first into the second; replayed on fixed values
(``params_to_config``) it is the only translation, so the two can never drift apart.
"""

from __future__ import annotations

import itertools
from typing import Any

import optuna

from tuner.engines import EngineConfig
from tuner.methods import METHODS
from tuner.space import IntRange, SearchSpace

__all__ = [
    "baseline_params",
    "config_to_params",
    "engine_config",
    "grid_configs",
    "grid_params",
    "other_targets",
    "params_to_config",
    "sample_candidate",
    "space_models",
    "speculative_config",
    "start_params",
]


def _served_by(space: SearchSpace, method: str) -> str | None:
    """The checkpoint (as written) a method serves instead of engine.model, if any."""
    spec = getattr(space.methods, method, None)
    model = getattr(spec, "model", None)
    if model and space.resolve_model(model) != space.resolve_model(space.engine.model):
        return model
    return None


def other_targets(space: SearchSpace) -> list[str]:
    """Checkpoints (as written in the space) that some method serves instead of engine.model.
    Each is another target: measured with its own baseline, reported apart."""
    out = [t for m in space.methods.enabled() if (t := _served_by(space, m))]
    return list(dict.fromkeys(out))


def space_models(space: SearchSpace) -> list[tuple[str, str]]:
    """(field, model as the engine gets it) for every checkpoint the space names: the
    target, each draft and head, the MTP checkpoint; each model once, under its first field."""
    m = space.methods
    named = [("engine.model", space.engine.model)]
    if m.draft_model is not None:
        named += [("methods.draft_model.drafts", d) for d in m.draft_model.drafts]
    for name in ("eagle", "eagle3"):
        if (spec := getattr(m, name)) is not None:
            named += [(f"methods.{name}.heads", h) for h in spec.heads]
    if m.mtp is not None and m.mtp.model is not None:
        named.append(("methods.mtp.model", m.mtp.model))
    out: dict[str, str] = {}
    for field, written in named:
        out.setdefault(space.resolve_model(written), field)
    return [(field, model) for model, field in out.items()]


def sample_candidate(trial: optuna.trial.BaseTrial, space: SearchSpace) -> dict[str, Any]:
    """Define-by-run: a parameter exists only where it means something."""
    method = trial.suggest_categorical("method", ["none", *space.methods.enabled()])
    params: dict[str, Any] = {"method": method}
    if method == "none":
        others = other_targets(space)
        if others:
            t = trial.suggest_categorical("none.target", [space.engine.model, *others])
            if t != space.engine.model:
                params["target"] = t
    else:
        m = METHODS[method]
        spec = getattr(space.methods, method)
        for p in m.active(spec):
            src = getattr(spec, p.source)
            name = m.optuna_name(p)
            if isinstance(src, IntRange):
                params[p.key] = trial.suggest_int(name, src.min, src.max)
            else:
                params[p.key] = trial.suggest_categorical(name, src)
        params = m.fix(params)
        if (served := _served_by(space, method)) is not None:
            params["target"] = served
    params["max_num_seqs"] = trial.suggest_categorical("max_num_seqs", space.max_num_seqs)
    params["memory_fraction"] = trial.suggest_categorical("memory_fraction", space.memory_fraction)
    return params


def baseline_params(space: SearchSpace, target: str | None = None) -> dict[str, Any]:
    """Optuna parameters of the baseline on engine.model, or on another target, at the
    objective batch size (``SearchSpace.objective_max_num_seqs``)."""
    d: dict[str, Any] = {
        "method": "none",
        "max_num_seqs": space.objective_max_num_seqs,
        "memory_fraction": space.memory_fraction[0],
    }
    if other_targets(space):
        d["none.target"] = target or space.engine.model
    return d


def start_params(space: SearchSpace) -> list[dict[str, Any]]:
    """Optuna parameter dicts for ``start_with`` (unset fields: the method's default)."""
    out = []
    for sp in space.start_with:
        m = METHODS[sp.method]
        spec = getattr(space.methods, sp.method)
        d: dict[str, Any] = {
            "method": sp.method,
            "max_num_seqs": sp.max_num_seqs or space.objective_max_num_seqs,
            "memory_fraction": sp.memory_fraction or space.memory_fraction[0],
        }
        for p in m.active(spec):
            d[m.optuna_name(p)] = getattr(sp, p.key, None) or p.default(spec)
        out.append(d)
    return out


def config_to_params(c: dict[str, Any], space: SearchSpace) -> dict[str, Any] | None:
    """A trial's ``params`` as Optuna parameters of ``space``; None when outside it."""
    method = c.get("method")
    if c.get("max_num_seqs") not in space.max_num_seqs:
        return None
    if c.get("memory_fraction") not in space.memory_fraction:
        return None
    d: dict[str, Any] = {
        "method": method,
        "max_num_seqs": c["max_num_seqs"],
        "memory_fraction": c["memory_fraction"],
    }
    others = other_targets(space)
    if method == "none":
        if c.get("target") not in (None, *others):
            return None
        if others:
            d["none.target"] = c.get("target") or space.engine.model
        return d
    if method not in space.methods.enabled():
        return None
    m = METHODS[method]
    spec = getattr(space.methods, method)
    for p in m.params:
        if not p.searched(spec):
            if c.get(p.key) is not None:
                return None  # measured with an axis this space leaves out
            continue
        if c.get(p.key) not in p.choices(spec):
            return None
        d[m.optuna_name(p)] = c[p.key]
    if c.get("target") != _served_by(space, method):
        return None  # served from another checkpoint than this space's
    return d


def grid_params(space: SearchSpace) -> list[dict[str, Any]]:
    """Every distinct candidate of the space, as Optuna parameter dicts (enqueue-ready).

    The order is the one a grid sweep walks: baseline first, then each method, its
    parameters in the table's order, batch size and memory fraction. A combination the
    engine would run as another one (n-gram's max lookup below its min) is left out.
    """
    loads = [(s, f) for s in space.max_num_seqs for f in space.memory_fraction]
    out: list[dict[str, Any]] = []
    for target in [None, *other_targets(space)]:
        for s, f in loads:
            out.append({**baseline_params(space, target), "max_num_seqs": s, "memory_fraction": f})
    for name in space.methods.enabled():
        m = METHODS[name]
        spec = getattr(space.methods, name)
        active = m.active(spec)
        for values in itertools.product(*(p.choices(spec) for p in active)):
            plain = {p.key: v for p, v in zip(active, values, strict=True)}
            if m.fix(plain) != plain:
                continue
            named = {m.optuna_name(p): v for p, v in zip(active, values, strict=True)}
            for s, f in loads:
                out.append({"method": name, **named, "max_num_seqs": s, "memory_fraction": f})
    return out


def params_to_config(p: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """Optuna's namespaced parameter dict -> a trial's ``params`` (what a surface keys on):
    the same define-by-run code the study samples with, replayed on fixed values."""
    return sample_candidate(optuna.trial.FixedTrial(p), space)


def grid_configs(space: SearchSpace) -> list[dict[str, Any]]:
    return [params_to_config(p, space) for p in grid_params(space)]


def speculative_config(params: dict[str, Any], space: SearchSpace) -> dict[str, Any] | None:
    if params["method"] == "none":
        return None
    return METHODS[params["method"]].speculative_config(params, space.resolve_model)


def engine_config(params: dict[str, Any], space: SearchSpace) -> EngineConfig:
    e = space.engine
    return EngineConfig(
        model=space.resolve_model(params.get("target") or e.model),
        served_model_name=e.served_model_name,
        max_model_len=e.max_model_len,
        max_num_seqs=params["max_num_seqs"],
        memory_fraction=params["memory_fraction"],
        speculative_config=speculative_config(params, space),
        enforce_eager=e.enforce_eager,
        cpu_kvcache_gib=e.cpu_kvcache_gib,
        device=e.device,
        dtype=e.dtype,
        extra_args=tuple(e.extra_args),
        chat_template=space.resolve(e.chat_template) if e.chat_template else None,
    )
