"""Search-space schema: the YAML a user writes to describe one tuning job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tuner.space._methods import (
    METHOD_NAMES,
    DraftModelMethod,
    HeadMethod,
    IntRange,
    Methods,
    MtpMethod,
    NgramMethod,
    SpaceError,
    StartPoint,
)
from tuner.space._space import (
    METRIC_DIRECTIONS,
    SLO,
    EngineSpec,
    HostedEndpoint,
    LosslessSpec,
    MeasurementSpec,
    Objective,
    SearchSpace,
    WorkloadSpec,
)

__all__ = [
    "METHOD_NAMES",
    "METRIC_DIRECTIONS",
    "SLO",
    "DraftModelMethod",
    "EngineSpec",
    "HeadMethod",
    "HostedEndpoint",
    "IntRange",
    "LosslessSpec",
    "MeasurementSpec",
    "Methods",
    "MtpMethod",
    "NgramMethod",
    "Objective",
    "SearchSpace",
    "SpaceError",
    "StartPoint",
    "WorkloadSpec",
    "load_space",
    "loads_space",
    "parse_space",
]


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid search space {source}:"]
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_space(data: Any, *, base_dir: Path | None = None, source: str = "") -> SearchSpace:
    """Validate a mapping (already parsed YAML/JSON) into a SearchSpace or raise SpaceError."""
    if not isinstance(data, dict):
        raise SpaceError(f"invalid search space {source}: top level must be a mapping")
    if "base_dir" in data:
        raise SpaceError(f"invalid search space {source}:\n  base_dir: not a user field")
    try:
        space = SearchSpace.model_validate({**data, "base_dir": base_dir or Path.cwd()})
    except ValidationError as e:
        raise SpaceError(_format_errors(e, source)) from None
    return space


def load_space(path: str | Path) -> SearchSpace:
    """Read a YAML search space; relative paths inside it resolve against its folder."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SpaceError(f"cannot read search space {p}: {e.strerror}") from None
    return loads_space(text, base_dir=p.resolve().parent, source=str(p))


def loads_space(text: str, *, base_dir: Path | None = None, source: str = "") -> SearchSpace:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpaceError(f"invalid search space {source}: not valid YAML: {e}") from None
    return parse_space(data, base_dir=base_dir, source=source)
