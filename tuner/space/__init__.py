"""Search-space schema: the YAML a user writes to describe one tuning job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tuner.space._batch import (
    batch_class,
    batch_classes,
    objective_max_num_seqs,
    running_batch,
)
from tuner.space._load import (
    MAX_SPACE_BYTES,
    MAX_SPACE_DEPTH,
    MAX_SPACE_VALUES,
    check_shape,
    read_yaml,
    shape_problem,
)
from tuner.space._methods import (
    MAX_RANGE,
    METHOD_NAMES,
    BlockDraftMethod,
    DraftModelMethod,
    HeadMethod,
    IntRange,
    Methods,
    MtpMethod,
    NgramMethod,
    SpaceError,
    StackedHeadMethod,
    StartPoint,
    SuffixMethod,
)
from tuner.space._sampling import GREEDY, SamplingSpec, sampling_text
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
    "BlockDraftMethod",
    "GREEDY",
    "MAX_RANGE",
    "MAX_SPACE_BYTES",
    "MAX_SPACE_DEPTH",
    "MAX_SPACE_VALUES",
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
    "SamplingSpec",
    "SearchSpace",
    "SpaceError",
    "StackedHeadMethod",
    "StartPoint",
    "SuffixMethod",
    "WorkloadSpec",
    "batch_class",
    "batch_classes",
    "check_shape",
    "load_space",
    "loads_space",
    "objective_max_num_seqs",
    "parse_space",
    "read_yaml",
    "running_batch",
    "sampling_text",
    "shape_problem",
]


def _space_error(err: ValidationError, source: str) -> SpaceError:
    """Every error as a ``  field.path: reason`` line, and as (path, reason) pairs."""
    lines = [f"invalid search space {source}:"]
    pairs = []
    for e in err.errors(include_input=False, include_url=False):
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"  {loc}: {msg}")
        pairs.append((tuple(e["loc"]), msg))
    return SpaceError("\n".join(lines), pairs)


def parse_space(data: Any, *, base_dir: Path | None = None, source: str = "") -> SearchSpace:
    """Validate a mapping (already parsed YAML/JSON) into a SearchSpace or raise SpaceError."""
    if not isinstance(data, dict):
        raise SpaceError(f"invalid search space {source}: top level must be a mapping")
    check_shape(data, source)
    if "base_dir" in data:
        raise SpaceError(
            f"invalid search space {source}:\n  base_dir: not a user field",
            [(("base_dir",), "not a user field")],
        )
    try:
        space = SearchSpace.model_validate({**data, "base_dir": base_dir or Path.cwd()})
    except ValidationError as e:
        raise _space_error(e, source) from None
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
    """Parse YAML text (size and nesting limited first) into a SearchSpace or SpaceError."""
    return parse_space(read_yaml(text, source), base_dir=base_dir, source=source)
