"""Every error answer as RFC 9457 ``application/problem+json``; 422s name their fields.

One shape for every 4xx/5xx (``type``, ``title``, ``status``, ``detail``, ``instance``, and
``errors`` with one ``{loc, msg, type}`` per field on a 422), so a client needs one parser.
The one place the domain errors (``tuner.errors``) become HTTP: ``NotFound`` 404 (a missing
job or trial), ``Conflict`` 409, ``InvalidInput`` 422 like FastAPI's own request validation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tuner.errors import Conflict, InvalidInput, NotFound
from tuner.storage import SchemaOutOfDate, StorageError, is_disconnect

__all__ = [
    "PROBLEM_JSON",
    "VALIDATION_TYPE",
    "install_problem_handlers",
    "problem",
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


def _field_errors(
    req: Request, fields: Iterable[tuple[Sequence[object], object, object]]
) -> JSONResponse:
    """One 422 from (loc, msg, type) triples: where and why, never the input echoed back (it
    may be NaN, which JSON cannot carry, nested past any encoder's recursion, or a secret
    pasted by mistake)."""
    errors = [
        {
            "loc": [x if isinstance(x, int) else str(x) for x in loc],
            "msg": str(msg),
            "type": str(kind),
        }
        for loc, msg, kind in fields
    ]
    shown = [f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in errors[:3]]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    detail = "; ".join(shown) + more if shown else "invalid request"
    return problem(422, detail, instance=req.url.path, type_=VALIDATION_TYPE, errors=errors)


async def validation_error_response(req: Request, exc: Exception) -> JSONResponse:
    """A request FastAPI refused before any route ran."""
    assert isinstance(exc, RequestValidationError)
    fields = (
        (e.get("loc", ()), e.get("msg", ""), e.get("type", "value_error")) for e in exc.errors()
    )
    return _field_errors(req, fields)


async def _invalid_input(req: Request, exc: Exception) -> JSONResponse:
    """Fields a service or the report refused: the same 422 as a request FastAPI refused."""
    assert isinstance(exc, InvalidInput)
    return _field_errors(req, ((p.loc, p.msg, p.type) for p in exc.problems))


async def _http_error(req: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else _title(exc.status_code)
    return problem(exc.status_code, detail, instance=req.url.path, headers=exc.headers)


async def _not_found(req: Request, exc: Exception) -> JSONResponse:
    # The one place a missing job or trial becomes a 404 (the store raises them).
    return problem(404, str(exc), instance=req.url.path)


async def _conflict(req: Request, exc: Exception) -> JSONResponse:
    return problem(409, str(exc), instance=req.url.path)


async def _schema(req: Request, exc: Exception) -> JSONResponse:
    return problem(503, str(exc), instance=req.url.path)


async def _storage(req: Request, _exc: Exception) -> JSONResponse:
    return problem(503, "database unavailable", instance=req.url.path)


async def _unexpected(req: Request, exc: Exception) -> JSONResponse:
    # Optuna's storage wraps a lost connection in its own error (StorageInternalError):
    # still the database, not a bug.
    if is_disconnect(exc):
        return problem(503, "database unavailable", instance=req.url.path)
    return problem(500, "internal error", instance=req.url.path)


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error_response)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(Conflict, _conflict)
    app.add_exception_handler(SchemaOutOfDate, _schema)
    app.add_exception_handler(StorageError, _storage)
    app.add_exception_handler(Exception, _unexpected)
