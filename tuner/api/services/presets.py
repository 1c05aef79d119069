"""Search spaces: the presets in ``search_spaces/`` and a submission's space, validated."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tuner.api._paths import as_written, check_paths
from tuner.api.schemas import JobCreate, SearchSpacePreset, SpaceValidation
from tuner.api.settings import ServiceSettings
from tuner.errors import FieldProblem, InvalidInput
from tuner.measure import load_all_prompts
from tuner.space import SearchSpace, SpaceError, parse_space, read_yaml
from tuner.surface import SurfaceError, read_surface
from tuner.workloads import WorkloadError

__all__ = ["list_presets", "resolve_space", "validation"]

# A preset is a search space: the same 1 MiB limit as a submitted one.
MAX_PRESET_BYTES = 1024 * 1024


def _space_problems(err: SpaceError, prefix: Sequence[str | int]) -> InvalidInput:
    """A SpaceError's (field path, reason) pairs as one refused field each; the path keeps
    each key as written (``"¹"``, ``"a.b"``) and each list index as an int."""
    problems = [FieldProblem((*prefix, *loc), msg, "search_space") for loc, msg in err.errors]
    if not problems:  # one-line messages: not YAML, not a mapping, unreadable, too deep
        lines = str(err).splitlines()
        msg = lines[0] if lines else "invalid search space"
        msg = re.sub(r"^invalid search space [^:]*: ", "", msg)
        problems.append(FieldProblem(tuple(prefix), msg, "search_space"))
    return InvalidInput(problems)


def _preset_files(folder: Path) -> dict[str, Path]:
    """Regular files of at most MAX_PRESET_BYTES inside ``folder`` (symlinks resolved)."""
    root = folder.resolve()
    out = {}
    for path in sorted(folder.glob("*.yaml")):
        real = path.resolve()
        if real.is_relative_to(root) and real.is_file():
            if real.stat().st_size <= MAX_PRESET_BYTES:
                out[path.stem] = real
    return out


def list_presets(folder: Path) -> list[SearchSpacePreset]:
    out = []
    for stem, path in _preset_files(folder).items():
        text = path.read_text()
        try:
            space = parse_space(read_yaml(text, path.name), base_dir=folder, source=path.name)
            trials, methods, slo, error = (
                space.trials,
                space.methods.enabled(),
                space.slo.limits(),
                None,
            )
        except SpaceError as e:
            trials, methods, slo, error = None, [], {}, str(e)
        out.append(
            SearchSpacePreset(
                name=stem,
                file=f"{stem}.yaml",
                yaml=text,
                trials=trials,
                methods=methods,
                slo=slo,
                error=error,
            )
        )
    return out


def _source_data(settings: ServiceSettings, body: JobCreate) -> tuple[str, Any, str]:
    """(field name, parsed mapping, YAML text to keep with the job)."""
    if body.preset is not None:
        names = _preset_files(settings.search_spaces_dir)
        path = names.get(body.preset)
        if path is None:
            raise InvalidInput.field(
                ("body", "preset"),
                f"unknown preset {body.preset!r}; choose from {', '.join(sorted(names))}",
            )
        text = path.read_text()
        try:
            return "preset", read_yaml(text, path.name), text
        except SpaceError as e:
            raise _space_problems(e, ("body", "preset")) from None
    if body.search_space_yaml is not None:
        try:
            data = read_yaml(body.search_space_yaml)
        except SpaceError as e:
            msg = str(e).removeprefix("invalid search space : ")
            raise InvalidInput.field(("body", "search_space_yaml"), msg, "yaml_error") from None
        return "search_space_yaml", data, body.search_space_yaml
    assert body.search_space is not None
    return "search_space", body.search_space, yaml.safe_dump(body.search_space, sort_keys=False)


def _check_hosted(settings: ServiceSettings, space: SearchSpace, where: str) -> None:
    """A submitted job runs with the service's environment: its hosted references may name
    only the configured key variables and hosts (SPECTUNE_HOSTED_API_KEY_ENVS, _HOSTS)."""
    problems = []
    for i, h in enumerate(space.hosted):
        loc = ("body", where, "hosted", i)
        if not settings.hosted_url_allowed(h.base_url):
            problems.append(
                FieldProblem(
                    (*loc, "base_url"),
                    "not a host this service may send requests to: give a plain "
                    "http(s)://host[:port][/path] on a host in SPECTUNE_HOSTED_HOSTS",
                    "not_allowed",
                )
            )
        if h.api_key_env is not None and h.api_key_env not in settings.hosted_api_key_envs:
            problems.append(
                FieldProblem(
                    (*loc, "api_key_env"),
                    "not a key variable this service may send: name one listed in "
                    "SPECTUNE_HOSTED_API_KEY_ENVS",
                    "not_allowed",
                )
            )
    if problems:
        raise InvalidInput(problems)


def resolve_space(settings: ServiceSettings, body: JobCreate) -> tuple[SearchSpace, str]:
    """The validated space with the request's overrides; InvalidInput naming fields
    otherwise."""
    where, data, text = _source_data(settings, body)
    if isinstance(data, dict):
        data = dict(data)
        if body.trials is not None:
            data["trials"] = body.trials
        if body.slo is not None:
            old = data.get("slo")
            data["slo"] = {**(old if isinstance(old, dict) else {}), **body.slo.limits()}
    try:
        space = parse_space(data, base_dir=settings.search_spaces_dir.resolve(), source=where)
    except SpaceError as e:
        raise _space_problems(e, ("body", where)) from None
    _check_hosted(settings, space, where)
    check_paths(settings, space, where)  # before anything opens a file the job names
    try:
        load_all_prompts(space)  # a workload file that cannot be read is bad input, too
    except WorkloadError as e:
        msg = as_written(str(e), settings, space)
        raise InvalidInput.field(("body", where, "workload"), msg) from None
    surface = space.engine.surface
    if surface is not None:  # so is a file that is not a surface (not a failed job later)
        try:
            read_surface(space.resolve(surface), surface)
        except SurfaceError as e:
            raise InvalidInput.field(("body", where, "engine", "surface"), str(e)) from None
    return space, text


def validation(settings: ServiceSettings, body: JobCreate) -> SpaceValidation:
    """A submission checked in full, nothing stored (the UI's inline validation)."""
    space, _ = resolve_space(settings, body)
    return SpaceValidation(
        name=space.name,
        n_trials=space.trials,
        methods=space.methods.enabled(),
        slo=space.slo.limits(),
        concurrency=list(space.concurrency),
    )
