"""Turning domain errors into 4xx answers that name the field."""

from __future__ import annotations

import re
from collections.abc import Sequence

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from tuner.space import SpaceError

__all__ = ["field_error", "space_error", "validation_error_response"]


def field_error(loc: Sequence[str | int], msg: str, kind: str = "value_error") -> Exception:
    """A 422 in FastAPI's own shape: ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``."""
    return RequestValidationError([{"loc": tuple(loc), "msg": msg, "type": kind}])


def space_error(err: SpaceError, prefix: Sequence[str | int]) -> Exception:
    """A SpaceError's (field path, reason) pairs as one 422 entry per field; the path keeps
    each key as written (``"¹"``, ``"a.b"``) and each list index as an int."""
    errors = [
        {"loc": (*prefix, *loc), "msg": msg, "type": "search_space"} for loc, msg in err.errors
    ]
    if not errors:  # one-line messages: not YAML, not a mapping, unreadable, too deep
        lines = str(err).splitlines()
        msg = lines[0] if lines else "invalid search space"
        msg = re.sub(r"^invalid search space [^:]*: ", "", msg)
        errors.append({"loc": tuple(prefix), "msg": msg, "type": "search_space"})
    return RequestValidationError(errors)


async def validation_error_response(_req: Request, exc: Exception) -> JSONResponse:
    """Every 422: where and why, never the input echoed back (it may be NaN, which JSON
    cannot carry, nested past any encoder's recursion, or a secret pasted by mistake)."""
    assert isinstance(exc, RequestValidationError)
    detail = [
        {
            "loc": [x if isinstance(x, int) else str(x) for x in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "value_error")),
        }
        for e in exc.errors()
    ]
    return JSONResponse({"detail": detail}, status_code=422)
