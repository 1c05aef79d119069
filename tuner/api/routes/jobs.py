"""``/api/jobs``: submit, list, show, cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status

from tuner.api._deps import MAX_OFFSET, Authorized, JobId, SettingsDep, StoreDep
from tuner.api._openapi import AUTH, responses
from tuner.api.schemas import JobCreate, JobList, JobPublic, JobState
from tuner.api.services import jobs

router = APIRouter(
    prefix="/api/jobs", tags=["jobs"], dependencies=[Authorized], responses=responses(*AUTH)
)

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        pattern=r"^[\x21-\x7e]+$",
        description="repeat the request with the same key: the first job is answered (200), "
        "never a second one; the same key with another body is a 409. Wins over the body's "
        "idempotency_key (kept for older clients).",
    ),
]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {
            "description": "a repeat of an earlier request with the same idempotency key",
            "model": JobPublic,
        },
        **responses(
            409,
            413,
            422,
            c409="idempotency key already used with a different body",
            c422="invalid search space or header; each error names its field",
        ),
    },
)
def submit_job(
    body: JobCreate,
    store: StoreDep,
    settings: SettingsDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobPublic:
    """Queue a job. Validated in full before anything is stored."""
    if idempotency_key is not None:
        body = body.model_copy(update={"idempotency_key": idempotency_key})
    job_id, created = jobs.submit(store, settings, body)
    if not created:
        response.status_code = status.HTTP_200_OK
    else:
        response.headers["Location"] = f"/api/jobs/{job_id}"
    return jobs.get_job(store, job_id)


@router.get("", responses=responses(422))
def list_jobs(
    store: StoreDep,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    state: JobState | None = None,
) -> JobList:
    """Newest first."""
    return jobs.list_jobs(store, offset, limit, state)


@router.get("/{job_id}", responses=responses(404, 422))
def get_job(job_id: JobId, store: StoreDep) -> JobPublic:
    return jobs.get_job(store, job_id)


@router.post(
    "/{job_id}/cancel",
    responses={
        202: {
            "description": "running: the worker stops the engine and ends the job",
            "model": JobPublic,
        },
        **responses(404, 409, 422, c409="the job has already ended"),
    },
)
def cancel_job(job_id: JobId, store: StoreDep, response: Response) -> JobPublic:
    """A queued job ends at once; a running one stops its engine, keeping finished trials."""
    job, running = jobs.cancel(store, job_id)
    if running:
        response.status_code = status.HTTP_202_ACCEPTED
    return job
