"""Liveness and readiness (no auth: they reveal no job data)."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from tuner.api._deps import StoreDep
from tuner.storage import database_problem

router = APIRouter(tags=["health"])


class WorkerState(BaseModel):
    id: str
    alive: bool
    job: int | None


class Readiness(BaseModel):
    """Both answers of /readyz: 200 ready, 503 not (with why)."""

    status: str
    problems: list[str]
    worker: WorkerState | None


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process answers."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "not ready: `problems` says why"}},
)
def readyz(request: Request, store: StoreDep) -> JSONResponse:
    """The database answers (a SQLite file is read afresh from disk) at this SpecTune's
    schema, and the embedded worker runs."""
    problems = []
    try:
        if (db := database_problem(store.url)) is not None:
            problems.append(db)
    except Exception as e:  # any failure to reach the database means not ready
        problems.append(f"database: {type(e).__name__}")
    worker = getattr(request.app.state, "worker", None)
    if worker is not None and not worker.alive:
        problems.append("embedded worker is not running")
    body = {
        "status": "ready" if not problems else "not ready",
        "problems": problems,
        "worker": None
        if worker is None
        else {"id": worker.worker_id, "alive": worker.alive, "job": worker.current_job},
    }
    code = status.HTTP_200_OK if not problems else status.HTTP_503_SERVICE_UNAVAILABLE
    return JSONResponse(body, status_code=code)
