"""Reading a search space's text safely: a size limit, and a nesting limit checked before
anything recursive (PyYAML's composer, pydantic, ``yaml.safe_dump``) walks the document.

Why check the events first: PyYAML's parser is a loop but its composer recurses once per
level, so ``[[[[…`` 50,000 deep raises RecursionError (or worse) before any schema runs. No
search space is more than a handful of levels deep, so a limit of ``MAX_SPACE_DEPTH`` costs
nothing real.
"""

from __future__ import annotations

from typing import Any

import yaml

from tuner.space._methods import SpaceError

__all__ = [
    "MAX_SPACE_BYTES",
    "MAX_SPACE_DEPTH",
    "MAX_SPACE_VALUES",
    "check_shape",
    "depth_problem",
    "read_yaml",
    "shape_problem",
]

MAX_SPACE_BYTES = 1024 * 1024
MAX_SPACE_DEPTH = 32
# Values (scalars, lists, mappings) in one space; YAML aliases count each time they are used,
# so a "billion laughs" document is refused instead of walked.
MAX_SPACE_VALUES = 100_000

_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _nested_too_deep(text: str) -> bool:
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, _OPEN):
            depth += 1
            if depth > MAX_SPACE_DEPTH:
                return True
        elif isinstance(event, _CLOSE):
            depth -= 1
    return False


def read_yaml(text: str, source: str = "") -> Any:
    """The parsed document, or SpaceError: too large, nested too deep, or not YAML."""
    if len(text.encode("utf-8", "replace")) > MAX_SPACE_BYTES:
        raise SpaceError(f"invalid search space {source}: over {MAX_SPACE_BYTES} bytes")
    try:
        if _nested_too_deep(text):
            raise SpaceError(depth_problem(source))
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpaceError(f"invalid search space {source}: not valid YAML: {e}") from None
    except RecursionError:  # the limit above should make this unreachable; never a crash
        raise SpaceError(depth_problem(source)) from None


def depth_problem(source: str = "") -> str:
    return f"invalid search space {source}: nested deeper than {MAX_SPACE_DEPTH} levels"


def shape_problem(data: Any) -> str | None:
    """Too deep or too many values in ``data``'s dicts and lists (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_SPACE_VALUES:
            return f"more than {MAX_SPACE_VALUES} values"
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list | tuple):
            children = list(node)
        else:
            continue
        if depth > MAX_SPACE_DEPTH:
            return f"nested deeper than {MAX_SPACE_DEPTH} levels"
        stack.extend((c, depth + 1) for c in children)
    return None


def check_shape(data: Any, source: str = "") -> None:
    """SpaceError when ``data`` (parsed JSON or YAML) nests deeper or holds more values than
    any search space (a document that refers to itself is infinitely deep)."""
    if (why := shape_problem(data)) is not None:
        raise SpaceError(f"invalid search space {source}: {why}")
