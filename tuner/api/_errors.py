"""Turning domain errors into 4xx answers that name the field."""

from __future__ import annotations

import re
from collections.abc import Sequence

from fastapi.exceptions import RequestValidationError

from tuner.space import SpaceError

__all__ = ["field_error", "space_error"]

_LINE = re.compile(r"^  (?P<loc>[^:]+): (?P<msg>.*)$")


def field_error(loc: Sequence[str | int], msg: str, kind: str = "value_error") -> Exception:
    """A 422 in FastAPI's own shape: ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``."""
    return RequestValidationError([{"loc": tuple(loc), "msg": msg, "type": kind}])


def space_error(err: SpaceError, prefix: Sequence[str | int]) -> Exception:
    """A SpaceError's ``  field.path: reason`` lines as one 422 entry per field."""
    errors = []
    lines = str(err).splitlines()
    for line in lines[1:]:
        m = _LINE.match(line)
        if not m:
            continue
        loc = m["loc"]
        parts = [] if loc == "(top level)" else loc.split(".")
        path = [int(p) if p.isdigit() else p for p in parts]
        errors.append({"loc": (*prefix, *path), "msg": m["msg"], "type": "search_space"})
    if not errors:  # one-line messages: not YAML, not a mapping, unreadable
        msg = lines[0] if lines else "invalid search space"
        msg = re.sub(r"^invalid search space [^:]*: ", "", msg)
        errors.append({"loc": tuple(prefix), "msg": msg, "type": "search_space"})
    return RequestValidationError(errors)
