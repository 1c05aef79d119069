"""The OpenAPI document's conventions: one operation id per route (its function's name) and
every status a route can answer documented, errors as ``application/problem+json``.

Routes list their codes with ``responses(...)``; ``install_openapi`` then gives every 4xx/5xx
without a model of its own the ``Problem`` schema, so a generated client (or schemathesis)
checks error bodies against what the server really sends.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from tuner.api._errors import PROBLEM_JSON
from tuner.api.schemas import Problem

__all__ = ["install_openapi", "operation_id", "responses"]

_WHY = {
    400: "the request body cannot be read (not UTF-8 JSON)",
    401: "missing, unknown or revoked bearer token (auth is on)",
    404: "no such job or trial",
    409: "conflicts with the job's state",
    413: "request body over the service's limit",
    422: "invalid input; `errors` names each field",
    429: "over this client's request rate; retry after `Retry-After` seconds",
    503: "database unavailable or at an older schema",
}
# What every route behind auth can answer, and what every /api route can.
AUTH = (401, 429, 503)
_REF = "#/components/schemas/Problem"


def responses(*codes: int, **why: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each code with its default reason, or ``why["c409"]``."""
    return {c: {"description": why.get(f"c{c}", _WHY.get(c, "error"))} for c in codes}


def operation_id(route: APIRoute) -> str:
    """The route function's name: stable, readable ids (``submit_job``, ``get_pareto``)."""
    return route.name


def _problem_content(resp: dict[str, Any]) -> None:
    schema = resp.get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref", "")
    if ref and not ref.endswith("/HTTPValidationError"):
        return  # a model of its own (readiness answers its report with 503)
    resp["content"] = {PROBLEM_JSON: {"schema": {"$ref": _REF}}}


def _implied(path: str, op: dict[str, Any]) -> list[int]:
    """Codes the app's own layers can answer on any such route, whatever it declares: the
    rate limit on /api, auth and its database look-up, validation, the body limit, 404."""
    codes = [429] if path.startswith("/api/") else []
    if op.get("security"):
        codes += [401, 503]
    if op.get("parameters") or op.get("requestBody"):
        codes.append(422)
    if op.get("requestBody"):
        codes += [400, 413]
    if "{job_id}" in path:
        codes.append(404)
    return codes


def _rewrite(schema: dict[str, Any]) -> None:
    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    comps.update(problem.pop("$defs", {}))
    comps["Problem"] = problem
    for path, ops in schema.get("paths", {}).items():
        for op in ops.values():
            documented = op.setdefault("responses", {})
            for c in _implied(path, op):
                documented.setdefault(str(c), {"description": _WHY[c]})
            for code, resp in documented.items():
                if code.isdigit() and int(code) >= 400:
                    _problem_content(resp)
                if code == "429":
                    resp["headers"] = {
                        "Retry-After": {
                            "description": "seconds until a request may succeed",
                            "schema": {"type": "integer"},
                        }
                    }
                if code == "401":
                    resp["headers"] = {
                        "WWW-Authenticate": {"schema": {"type": "string", "const": "Bearer"}}
                    }
    text = repr(schema["paths"])
    for unused in ("HTTPValidationError", "ValidationError"):
        if f"/{unused}'" not in text:
            comps.pop(unused, None)


def install_openapi(app: FastAPI) -> None:
    """Rewrite the generated document once, the first time it is asked for."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _rewrite(base())
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
