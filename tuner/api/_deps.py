"""Annotated dependencies shared by the routers: settings, the store, auth, query slices."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tuner.api.settings import ServiceSettings, token_matches
from tuner.report import ReportQuery
from tuner.storage import Store

__all__ = [
    "MAX_OFFSET",
    "Authorized",
    "JobId",
    "ReportQueryDep",
    "SettingsDep",
    "StoreDep",
    "get_settings",
    "get_store",
    "require_token",
]


def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]


def get_store(settings: SettingsDep) -> Store:
    """The service's database (as the FastAPI template's ``SessionDep``): the routes and
    services reach it only through this ``Store``, which owns every session.

    A request waits ``db_retry_s`` (seconds) for an unreachable database, then answers 503;
    the storage layer's long retry is for the worker, whose job must outlive a restart."""
    store = Store(settings.database_url)
    store.retry_for_s = settings.db_retry_s
    return store


StoreDep = Annotated[Store, Depends(get_store)]

_bearer = HTTPBearer(
    auto_error=False,
    description="a token from `spectune token create`, or one whose SHA-256 is configured",
)


def require_token(
    settings: SettingsDep,
    store: StoreDep,
    cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """With auth on, every write and every read of job data needs a valid token.

    Auth is on when a digest is configured, ``require_auth`` is set, or the database holds any
    token (revoked ones too, so revoking the last token never opens the server). The
    database is asked on every request: a revoked token fails on its next use."""
    presented = cred.credentials if cred is not None else None
    if presented is not None and token_matches(presented, settings.api_token_sha256):
        return
    stored, valid = store.token_state(presented)
    if valid or not (settings.auth_enabled or stored):
        return
    raise HTTPException(
        status.HTTP_401_UNAUTHORIZED,
        "missing, unknown or revoked bearer token",
        headers={"WWW-Authenticate": "Bearer"},
    )


Authorized = Depends(require_token)

# Ids, trial numbers and paging offsets fit in a signed 32-bit integer: anything larger is a
# 422 here, never an integer overflow in the database driver.
MAX_OFFSET = 2**31 - 1
JobId = Annotated[int, Path(ge=1, le=MAX_OFFSET, description="job id")]

_TARGET = (
    "another served checkpoint of the job (an MTP model): its own front against its own "
    "baseline; default engine.model"
)


def report_query(
    workload: Annotated[str | None, Query(max_length=100)] = None,
    concurrency: Annotated[int | None, Query(ge=1, le=4096)] = None,
    slo_p99_tpot_ms: Annotated[float | None, Query(gt=0, le=600_000, allow_inf_nan=False)] = None,
    slo_p99_ttft_ms: Annotated[float | None, Query(gt=0, le=600_000, allow_inf_nan=False)] = None,
    slo_p99_e2e_ms: Annotated[float | None, Query(gt=0, le=3_600_000, allow_inf_nan=False)] = None,
    target: Annotated[str | None, Query(max_length=4096, description=_TARGET)] = None,
) -> ReportQuery:
    """SLO limits given here replace the job's for this answer only; nothing is re-run."""
    slo = {
        k: v
        for k, v in {
            "p99_tpot_ms": slo_p99_tpot_ms,
            "p99_ttft_ms": slo_p99_ttft_ms,
            "p99_e2e_ms": slo_p99_e2e_ms,
        }.items()
        if v is not None
    }
    return ReportQuery(workload, concurrency, slo, target)


ReportQueryDep = Annotated[ReportQuery, Depends(report_query)]
