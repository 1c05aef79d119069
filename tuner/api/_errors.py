"""Every error answer as RFC 9457 ``application/problem+json``; 422s name their fields.

One shape for every 4xx/5xx (``type``, ``title``, ``status``, ``detail``, ``instance``, and
``errors`` with one ``{loc, msg, type}`` per field on a 422), so a client needs one parser.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tuner.space import SpaceError
from tuner.storage import JobNotFound, SchemaOutOfDate, StorageError, TrialNotFound

__all__ = [
    "PROBLEM_JSON",
    "VALIDATION_TYPE",
    "field_error",
    "install_problem_handlers",
    "problem",
    "space_error",
    "validation_error_response",
]

PROBLEM_JSON = "application/problem+json"
VALIDATION_TYPE = "urn:spectune:problem:validation-error"


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(
    status: int,
    detail: str,
    *,
    instance: str | None = None,
    type_: str = "about:blank",
    errors: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """One problem document; ``title`` is the status's own phrase (as ``about:blank`` says)."""
    body: dict[str, Any] = {
        "type": type_,
        "title": "Validation error" if type_ == VALIDATION_TYPE else _title(status),
        "status": status,
        "detail": detail,
        "instance": instance,
    }
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def field_error(loc: Sequence[str | int], msg: str, kind: str = "value_error") -> Exception:
    """A 422 naming one field (answered with ``errors: [{"loc", "msg", "type"}]``)."""
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


async def validation_error_response(req: Request, exc: Exception) -> JSONResponse:
    """Every 422: where and why, never the input echoed back (it may be NaN, which JSON
    cannot carry, nested past any encoder's recursion, or a secret pasted by mistake)."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "loc": [x if isinstance(x, int) else str(x) for x in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "value_error")),
        }
        for e in exc.errors()
    ]
    shown = [f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in errors[:3]]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    detail = "; ".join(shown) + more if shown else "invalid request"
    return problem(422, detail, instance=req.url.path, type_=VALIDATION_TYPE, errors=errors)


async def _http_error(req: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else _title(exc.status_code)
    return problem(exc.status_code, detail, instance=req.url.path, headers=exc.headers)


async def _not_found(req: Request, exc: Exception) -> JSONResponse:
    # The one place a missing job or trial becomes a 404 (the store raises them).
    return problem(404, str(exc), instance=req.url.path)


async def _schema(req: Request, exc: Exception) -> JSONResponse:
    return problem(503, str(exc), instance=req.url.path)


async def _storage(req: Request, _exc: Exception) -> JSONResponse:
    return problem(503, "database unavailable", instance=req.url.path)


async def _unexpected(req: Request, _exc: Exception) -> JSONResponse:
    return problem(500, "internal error", instance=req.url.path)


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error_response)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(JobNotFound, _not_found)
    app.add_exception_handler(TrialNotFound, _not_found)
    app.add_exception_handler(SchemaOutOfDate, _schema)
    app.add_exception_handler(StorageError, _storage)
    app.add_exception_handler(Exception, _unexpected)
