"""``spectune plan``: what a search space would cost before any engine starts.

Validation, the grid, pre-flight on every grid configuration, and *estimates* of launches and
time. Why estimates only: the search stops at the trial budget and reuses a configuration it
has launched, so launches are an upper bound; time per launch comes from this database's
past launches on the same device when there are some, and is otherwise unknown (never made
up).
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from tuner.candidates import engine_config, grid_params, params_to_config, space_models
from tuner.engines import ENGINE_KINDS, server_class
from tuner.hardware import nvidia_smi
from tuner.hub import downloads_allowed, is_hub_id, local_view
from tuner.measure import load_all_prompts
from tuner.methods import params_text
from tuner.preflight import PreflightError, device_memory_bytes, preflight
from tuner.space import SearchSpace
from tuner.states import TrialState
from tuner.storage import StorageError, Store
from tuner.surface import SurfaceError, read_surface

__all__ = ["plan_space", "plan_text", "valid_line"]

# Past launched trials the time estimate reads (newest jobs first).
_HISTORY_JOBS = 50


def _db_exists(url: str) -> bool:
    """Whether reading ``url`` can work without creating an empty SQLite file."""
    try:
        u = make_url(url)
    except ArgumentError:
        return False
    if u.get_backend_name() != "sqlite":
        return True
    return bool(u.database) and u.database != ":memory:" and Path(u.database).is_file()


def _seconds_per_launch(url: str | None, device: str) -> tuple[float | None, int]:
    """Median wall time of past launched trials on ``device`` (startup and measurement) and
    how many there were; (None, 0) without a database or history."""
    if url is None or not _db_exists(url):
        return None, 0
    try:
        jobs, _ = Store(url).list_jobs(limit=_HISTORY_JOBS)
    except StorageError:
        return None, 0
    walls = [
        (t.finished_at - t.started_at).total_seconds()
        for j in jobs
        if (j.space or {}).get("engine", {}).get("device", "cuda") == device
        for t in j.trials
        if t.state == TrialState.COMPLETE
        and t.reused_from is None
        and t.log_path
        and t.finished_at
    ]
    return (statistics.median(walls), len(walls)) if walls else (None, 0)


def _label(c: dict[str, Any]) -> str:
    return f"{params_text(c)} seqs={c['max_num_seqs']} mem={c['memory_fraction']}"


def _preflight_grid(
    space: SearchSpace, configs: list[dict[str, Any]]
) -> tuple[list[dict[str, str]], list[str]]:
    """(refused configurations, notes of what was not checked), downloading nothing."""
    memory = device_memory_bytes(space.engine.device)
    refused = []
    notes: list[str] = []
    for c in configs:
        try:
            preflight(engine_config(c, space), memory_bytes=memory, notes=notes, fetch=False)
        except PreflightError as e:
            refused.append({"configuration": _label(c), "reason": str(e)})
    return refused, list(dict.fromkeys(notes))


def _engine_build(space: SearchSpace, configs: list[dict[str, Any]]) -> str | None:
    """A known defect of the installed engine build that bears on this space's sampled
    workload, and what SpecTune does about it (the engine's ``build_note``)."""
    if space.sampled_workload is None or space.engine.kind not in ENGINE_KINDS:
        return None
    for c in configs:
        if (cfg := engine_config(c, space)).speculative_config:
            return server_class(space.engine.kind).build_note(cfg)
    return None


def _hub_models(space: SearchSpace) -> list[dict[str, Any]]:
    """Each hub model of the space and whether this machine's cache holds it (what the job
    downloads before its first launch); read from the cache only, never the network."""
    out = []
    for field, model in space_models(space):
        if is_hub_id(model):
            cached = local_view(model, weights=True) is not None
            out.append({"field": field, "model": model, "cached": cached})
    return out


def _hardware(space: SearchSpace) -> dict[str, Any]:
    """The device the space launches on and whether this machine has it (nvidia-smi)."""
    device = space.engine.device
    gpus = (nvidia_smi("name") or []) if device == "cuda" else []
    needs = device == "cuda" and space.engine.surface is None
    return {"device": device, "needs_gpu": needs, "gpus": gpus, "gpu_found": bool(gpus)}


def plan_space(space: SearchSpace, source: str, db_url: str | None) -> dict[str, Any]:
    """The plan as data (``--json`` prints it as is). Raises SpaceError/WorkloadError."""
    prompts = sum(len(p) for p in load_all_prompts(space).values())
    configs = [params_to_config(p, space) for p in grid_params(space)]
    replay = space.engine.surface
    out: dict[str, Any] = {
        "space": source,
        "valid": True,
        "name": space.name,
        "methods": space.methods.enabled(),
        "prompts": prompts,
        "grid": {
            "configurations": len(configs),
            "by_method": dict(Counter(c["method"] for c in configs)),
        },
        "trials": space.trials,
        "replay_surface": replay,
    }
    if replay is not None:
        try:
            surf = read_surface(space.resolve(replay))
        except (SurfaceError, OSError) as e:
            out["preflight"] = {"checked": False, "refused": [], "why": f"surface: {e}"}
        else:
            refused = [
                {"configuration": _label(c), "reason": "not in the recorded surface"}
                for c in configs
                if surf.lookup(c) is None
            ]
            out["preflight"] = {"checked": True, "refused": refused}
        runnable = len(configs) - len(out["preflight"]["refused"])
    else:
        refused, notes = _preflight_grid(space, configs)
        out["preflight"] = {"checked": True, "refused": refused, "notes": notes}
        out["engine_build"] = _engine_build(space, configs)
        runnable = len(configs) - len(refused)
    out["hub_models"] = [] if replay is not None else _hub_models(space)
    out["downloads_allowed"] = downloads_allowed()
    out["hardware"] = _hardware(space)
    ms = space.measurement
    launches = 0 if replay is not None else min(space.trials, runnable)
    off = replay is not None or ms.confirm_top <= 0
    confirm_launches = 0 if off else ms.confirm_budget  # tuner.confirm: at most the budget
    per_launch, n_hist = (None, 0) if replay else _seconds_per_launch(db_url, space.engine.device)
    total = None if per_launch is None else per_launch * (launches + confirm_launches)
    out["estimate"] = {
        "is_estimate": True,
        "search_launches_at_most": launches,
        "confirm_launches_at_most": confirm_launches,
        "seconds_per_launch": None if per_launch is None else round(per_launch, 1),
        "seconds_per_launch_from": (
            f"median of {n_hist} past launches on {space.engine.device} in this database"
            if per_launch is not None
            else None
        ),
        "seconds_at_most": None if total is None else round(total),
    }
    return out


def valid_line(source: str, name: str, methods: list[str], prompts: int) -> str:
    """What ``validate`` and ``plan`` say first of a valid space."""
    return f"{source}: valid ({name}; methods {', '.join(methods)}; {prompts} prompts)"


def plan_text(p: dict[str, Any]) -> str:
    """The plan for a person; every estimate says it is one."""
    grid = p["grid"]
    by = ", ".join(f"{m} {n}" for m, n in grid["by_method"].items())
    lines = [
        valid_line(p["space"], p["name"], p["methods"], p["prompts"]),
        f"grid: {grid['configurations']} distinct engine configurations ({by}); "
        f"trial budget {p['trials']}",
    ]
    pf = p["preflight"]
    if not pf["checked"]:
        lines.append(f"pre-flight: not checked ({pf['why']})")
    elif pf["refused"]:
        lines.append(f"pre-flight: {len(pf['refused'])} configurations refused:")
        lines += [f"  {r['configuration']}: {r['reason']}" for r in pf["refused"]]
    elif pf.get("notes"):
        lines.append("pre-flight: no configuration refused; not checked yet:")
    else:
        lines.append("pre-flight: every configuration passes")
    lines += [f"  {n}" for n in pf.get("notes", [])]
    if p.get("engine_build"):
        lines.append(f"engine build: {p['engine_build']}")
    lines += _hub_lines(p)
    est = p["estimate"]
    if p["replay_surface"] is not None:
        lines.append(
            f"REPLAY of {p['replay_surface']}: no engine launches; answers in seconds "
            "(search benchmarking only)"
        )
        return "\n".join(lines)
    lines.append(
        f"ESTIMATE (upper bound): at most {est['search_launches_at_most']} engine launches for "
        f"the search + {est['confirm_launches_at_most']} to confirm (configurations already "
        "launched are reused, so usually fewer)"
    )
    if est["seconds_per_launch"] is None:
        lines.append(
            "ESTIMATE of time: unknown (no past launch on this device in the database; "
            "give --db with earlier jobs)"
        )
    else:
        lines.append(
            f"ESTIMATE of time: at most {est['seconds_at_most'] / 60:.0f} min "
            f"({est['seconds_per_launch']:.0f} s a launch: {est['seconds_per_launch_from']})"
        )
    return "\n".join(lines)


def _hub_lines(p: dict[str, Any]) -> list[str]:
    """The hub models and what the job does about them; the GPU a CUDA job needs."""
    out = []
    hub = p.get("hub_models") or []
    if hub:
        missing = [h for h in hub if not h["cached"]]
        if not missing:
            then = "nothing to download"
        elif p.get("downloads_allowed"):
            then = f"the job downloads {len(missing)} before its first launch"
        else:
            then = f"HF_HUB_OFFLINE is set: no download, {len(missing)} checked at launch"
        out.append(f"Hugging Face models: {len(hub)} ({then})")
        for h in hub:
            where = "in the local cache" if h["cached"] else "NOT in the local cache"
            out.append(f"  {h['model']} ({h['field']}): {where}")
    hw = p.get("hardware") or {}
    if hw.get("needs_gpu") and not hw.get("gpu_found"):
        out.append(
            "hardware: this job needs a GPU (engine.device: cuda) and this machine has none "
            "(nvidia-smi found no GPU): run it on a GPU machine"
        )
    elif hw.get("needs_gpu"):
        out.append(f"hardware: cuda on {len(hw['gpus'])} GPU(s): {', '.join(hw['gpus'])}")
    return out
