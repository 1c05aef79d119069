"""Jobs: submit with idempotency (nothing stored half-way), progress, list, cancel."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError

from tuner.api._scrub import scrub
from tuner.api.schemas import CurrentTrial, JobCreate, JobList, JobPublic
from tuner.api.services.presets import resolve_space
from tuner.api.settings import ServiceSettings
from tuner.errors import Conflict
from tuner.job import create_job
from tuner.space import SearchSpace, SpaceError
from tuner.states import TRIAL_FINISHED, JobState, TrialState
from tuner.storage import JobModel, JobNotFound, StorageError, Store, space_of_job, utcnow

__all__ = ["cancel", "get_job", "job_public", "list_jobs", "submit"]


# --------------------------------------------------------------------------- submit


def _request_sha256(body: JobCreate) -> str:
    canon = json.dumps(
        body.model_dump(mode="json", exclude={"idempotency_key"}), sort_keys=True
    ).encode()
    return hashlib.sha256(canon).hexdigest()


def _replay(store: Store, key: str, digest: str) -> int | None:
    """The job an earlier request with this key made, or Conflict if that body differed."""
    found = store.job_by_idempotency_key(key)
    if found is None:
        return None
    job_id, old = found
    if old != digest:
        raise Conflict(
            f"idempotency_key: already used by job {job_id} with a different request body"
        )
    return job_id


def submit(store: Store, settings: ServiceSettings, body: JobCreate) -> tuple[int, bool]:
    """Store a queued job for the worker; (job id, created). A repeat of an idempotent
    request returns the first job and ``created`` False."""
    digest = _request_sha256(body)
    key = body.idempotency_key
    if key is not None and (job_id := _replay(store, key, digest)) is not None:
        return job_id, False
    space, text = resolve_space(settings, body)
    job_id = create_job(store, space, space_yaml=text, n_trials=body.trials)
    # create_job leaves the row invisible to workers (for_worker False) until this commit,
    # so no worker can claim a job whose Optuna study does not exist yet.
    try:
        store.release_to_workers(job_id, key=key, digest=digest)
    except StorageError as e:
        store.delete_job(job_id)  # lost an idempotency race: keep nothing of this request
        if key is not None and isinstance(e.__cause__, IntegrityError):
            # A concurrent request with the same key committed first.
            if (other := _replay(store, key, digest)) is not None:
                return other, False
        raise
    return job_id, True


# --------------------------------------------------------------------------- progress


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else max(0.0, (b - a).total_seconds())


def _utc(dt: datetime | None) -> datetime | None:
    """Stored naive in UTC; answered with the zone so clients need not guess."""
    return None if dt is None else dt.replace(tzinfo=UTC)


def _space_or_none(job: JobModel) -> SearchSpace | None:
    """Read leniently (a space today's rules refuse shows with defaults for those fields);
    None when even that cannot read it."""
    try:
        return space_of_job(job, for_reading=True)
    except SpaceError:
        return None


def job_public(job: JobModel) -> JobPublic:
    """The job with its progress (the trials relationship must be loaded)."""
    space = _space_or_none(job)
    finished = [t for t in job.trials if t.state in TRIAL_FINISHED]
    running = [t for t in job.trials if t.state == TrialState.RUNNING]
    cur = running[-1] if running and job.state == JobState.RUNNING else None
    durations = [d for t in finished if (d := _seconds(t.started_at, t.finished_at)) is not None]
    eta = None
    if job.state in (JobState.QUEUED, JobState.RUNNING) and durations:
        remaining = max(0, job.n_trials - len(finished))
        eta = sum(durations) / len(durations) * remaining
        if cur is not None:
            eta = max(0.0, eta - (_seconds(cur.started_at, utcnow()) or 0.0))
    return JobPublic(
        id=job.job_id,
        name=job.name,
        state=job.state,  # type: ignore[arg-type]
        n_trials=job.n_trials,
        trials_done=len(finished),
        trials_failed=sum(1 for t in finished if t.state == TrialState.FAIL),
        current_trial=None
        if cur is None
        else CurrentTrial(
            number=cur.number,
            method=cur.method,
            params=cur.params,
            started_at=_utc(cur.started_at),
        ),
        eta_s=None if eta is None else round(eta, 1),
        cancel_requested=bool(job.cancel_requested),
        error=None if job.error is None else scrub(job.error),  # may quote an engine log
        created_at=_utc(job.created_at),
        started_at=_utc(job.started_at),
        finished_at=_utc(job.finished_at),
        engine_launches=job.engine_launches or 0,
        confirm_launches=job.confirm_launches or 0,
        engine_startup_s=round(job.engine_startup_s or 0.0, 2),
        stop_reason=job.stop_reason,
        workload=space.primary_workload if space else "",
        workloads=[w.name for w in space.all_workloads] if space else [],
        concurrency=list(space.concurrency) if space else [],
        objective_concurrency=space.primary_concurrency if space else 0,
        slo=space.slo.limits() if space else {},
        objectives=[
            {"metric": o.metric, "direction": o.resolved_direction} for o in space.objectives
        ]
        if space
        else [],
    )


def get_job(store: Store, job_id: int) -> JobPublic:
    return job_public(store.job(job_id, with_trials=True))


def list_jobs(store: Store, offset: int, limit: int, state: str | None) -> JobList:
    rows, total = store.list_jobs(offset=offset, limit=limit, state=state)
    return JobList(items=[job_public(j) for j in rows], total=total, offset=offset, limit=limit)


def cancel(store: Store, job_id: int) -> tuple[JobPublic, bool]:
    """Cancel a queued job at once, flag a running one for its worker; (the job, whether it
    was running). Conflict when it has already ended. A job whose stored space today's rules
    refuse ends at once, running or not: no worker of this version can run it to see the
    flag (one stuck ``running`` without an owner would otherwise stay so)."""
    why = store.space_refusal(job_id)  # JobNotFound passes through
    ended = JobState.CANCELLED
    if why is not None and store.end_refused(job_id, f"cancelled; {why}", state=ended):
        return get_job(store, job_id), False
    res = store.request_cancel(job_id)
    if not res.found:
        raise JobNotFound(f"job {job_id} not found")
    if not res.accepted:
        raise Conflict(f"job {job_id} has already ended ({res.state})")
    return get_job(store, job_id), res.state == JobState.RUNNING
