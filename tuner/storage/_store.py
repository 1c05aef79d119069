"""The one door to the database: a ``Store`` binds a URL once and owns every session.

As Optuna's ``RDBStorage`` holds its scoped session and finders, ``Store`` holds ours: the
finders raise one ``JobNotFound``; the writes of jobs, trials, references and API tokens,
the service's counts, the one read model of a trial (``_records.py``) and the machine's
launch history (``_history.py``) are its methods (the mixins beside this module use
``Store.session``). No other module opens a session.

Each public method states whether it rides out a database restart: ``retry_db`` (one short
transaction, so trying again is safe) or ``no_retry`` (its docstring or comment says why).
"""

from __future__ import annotations

import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import optuna
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, selectinload

from tuner.space import SearchSpace
from tuner.states import JobState
from tuner.storage._counts import CountQueries
from tuner.storage._db import ensure_schema, session_scope
from tuner.storage._history import HistoryQueries
from tuner.storage._models import JobModel, ReferenceModel, utcnow
from tuner.storage._queue import CancelResult, JobNotFound, QueueQueries
from tuner.storage._records import RecordQueries
from tuner.storage._retry import RETRY_FOR_S, ResilientRDBStorage, no_retry, retry_db
from tuner.storage._stored_space import SpaceRefused, StoredSpaceQueries, space_of_job
from tuner.storage._tokens import TokenQueries
from tuner.storage._trials import TrialQueries
from tuner.storage._watches import WatchQueries

__all__ = [
    "CancelResult",
    "JobNotFound",
    "SpaceRefused",
    "Store",
    "space_of_job",
    "job_id_of_study",
    "study_name_for",
]

StaleCallback = Callable[[optuna.Study, optuna.trial.FrozenTrial], None]


def study_name_for(job_id: int) -> str:
    return f"spectune-job-{job_id}"


def job_id_of_study(name: str) -> int | None:
    """The job whose study ``name`` is (``study_name_for``), or None for another study."""
    m = re.fullmatch(r"spectune-job-(\d+)", name)
    return int(m.group(1)) if m is not None else None


class Store(
    TrialQueries,
    RecordQueries,
    QueueQueries,
    TokenQueries,
    CountQueries,
    StoredSpaceQueries,
    WatchQueries,
    HistoryQueries,
):
    """SpecTune's tables and the Optuna studies beside them, in one database."""

    retry_for_s = RETRY_FOR_S  # how long a call waits for a restarting database server

    def __init__(self, url: str) -> None:
        self.url = url

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @no_retry  # the plumbing: its callers are the retried methods
    @contextmanager
    def session(self) -> Iterator[Session]:
        with session_scope(self.url) as s:
            yield s

    @retry_db  # the check reads; a migration is one transaction (PostgreSQL) under its lock
    def ensure_schema(self) -> None:
        ensure_schema(self.url)

    # ------------------------------------------------------------------ studies

    @retry_db  # building it reads the schema version: a restart then was a failed job
    def optuna_storage(
        self,
        *,
        heartbeat_s: float | None = None,
        grace_s: float | None = None,
        on_stale: StaleCallback | None = None,
    ) -> ResilientRDBStorage:
        """Optuna's storage on this database, riding out restarts; with ``heartbeat_s`` each
        running trial beats, and one silent for ``grace_s`` is failed by any worker sharing
        the study, which then calls ``on_stale`` (Optuna's distributed mode)."""
        kwargs: dict[str, Any] = {}
        if not self.url.startswith("sqlite"):
            kwargs["pool_pre_ping"] = True  # a connection from before a restart is replaced
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return ResilientRDBStorage(
                self.url,
                engine_kwargs=kwargs,
                heartbeat_interval=None if heartbeat_s is None else max(1, round(heartbeat_s)),
                grace_period=None if grace_s is None else max(1, round(grace_s)),
                heartbeat_stale_trial_callback=on_stale,
            )

    @no_retry  # the storage it reads through retries each read (and its making)
    def load_study(
        self,
        job_id: int,
        sampler: optuna.samplers.BaseSampler | None = None,
        storage: optuna.storages.BaseStorage | None = None,
    ) -> optuna.Study:
        """The job's study on ``storage``, or on this database's restart-riding storage
        (Optuna's own from the URL retried nothing: a submission meeting a restart was a
        500, found by bench/soak.py)."""
        return optuna.load_study(
            study_name=study_name_for(job_id),
            storage=storage or self.optuna_storage(),
            sampler=sampler,
        )

    # ------------------------------------------------------------------ jobs

    @no_retry  # each step retries, and each is safe to repeat (below)
    def create_job(
        self,
        space: SearchSpace,
        data: dict[str, Any],
        *,
        space_yaml: str | None,
        n_trials: int,
    ) -> int:
        """A queued job row and its Optuna study; nothing is kept half-way. Each step rides
        out a database restart (bench/soak.py: a 503 on ``POST /api/jobs``): the row is
        found again by this call's token, not made twice, and then named after its id; the
        study is made once. The row stays hidden from workers until the API releases it
        (``release_to_workers``), so a worker never claims a job between the steps."""
        self.ensure_schema()
        token = f"pending-{uuid.uuid4().hex}"
        job_id = self._insert_job(
            token,
            name=space.name,
            state=JobState.QUEUED,
            space=data,
            space_yaml=space_yaml,
            n_trials=n_trials,
        )
        try:
            self._name_study(job_id)
            storage = self.optuna_storage()
            self._create_study(storage, job_id, [o.resolved_direction for o in space.objectives])
        except BaseException:
            self.delete_job(job_id)
            raise
        return job_id

    @retry_db
    def _insert_job(self, token: str, **columns: Any) -> int:
        """The job's row, or the one an earlier try of this call committed before its answer
        was lost (found by ``token``, its provisional study name)."""
        with self.session() as s:
            found = s.scalar(select(JobModel.job_id).where(JobModel.study_name == token))
            if found is not None:
                return found
            job = JobModel(study_name=token, **columns)
            s.add(job)
            s.flush()
            return job.job_id

    @retry_db
    def _name_study(self, job_id: int) -> None:
        with self.session() as s:
            s.execute(
                update(JobModel)
                .where(JobModel.job_id == job_id)
                .values(study_name=study_name_for(job_id))
                .execution_options(synchronize_session=False)
            )

    @retry_db
    def _create_study(
        self, storage: optuna.storages.BaseStorage, job_id: int, directions: list[str]
    ) -> None:
        """The job's study, made once however often this is tried: an attempt applied before
        the connection dropped is found, not made twice (``load_if_exists``; the name is the
        job's). A submission meeting a database restart here was a 503 (bench/soak.py)."""
        optuna.create_study(
            storage=storage,
            study_name=study_name_for(job_id),
            directions=directions,
            load_if_exists=True,
        )

    @no_retry  # undoes a half-made job; a second try could find another one's study
    def delete_job(self, job_id: int) -> None:
        """Remove a job and its study (one this process created but must not keep)."""
        try:
            optuna.delete_study(study_name=study_name_for(job_id), storage=self.url)
        except KeyError:
            pass
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is not None:
                s.delete(job)

    @retry_db
    def job(self, job_id: int, *, with_trials: bool = False) -> JobModel:
        """The job row, detached (with its trials loaded when asked); JobNotFound if none."""
        opts = [selectinload(JobModel.trials)] if with_trials else []
        with self.session() as s:
            job = s.get(JobModel, job_id, options=opts)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            return job

    @retry_db
    def space(self, job_id: int, *, for_reading: bool = False) -> SearchSpace:
        """``space_of_job`` of the stored job: strict (to run it) unless ``for_reading``."""
        return space_of_job(self.job(job_id), for_reading=for_reading)

    @retry_db
    def list_jobs(
        self, *, offset: int = 0, limit: int | None = None, state: str | None = None
    ) -> tuple[list[JobModel], int]:
        """Newest first, with their trials loaded; and the total count for that filter."""
        with self.session() as s:
            q = select(JobModel)
            count = select(func.count(JobModel.job_id))
            if state is not None:
                q, count = q.where(JobModel.state == state), count.where(JobModel.state == state)
            total = s.scalar(count) or 0
            q = q.options(selectinload(JobModel.trials)).order_by(JobModel.job_id.desc())
            rows = s.scalars(q.offset(offset).limit(limit)).all()
            return list(rows), total

    @retry_db
    def succeeded_jobs(self, *, except_job: int) -> list[JobModel]:
        """Finished jobs other than ``except_job``, newest first (warm-start candidates)."""
        with self.session() as s:
            q = (
                select(JobModel)
                .where(JobModel.job_id != except_job, JobModel.state == JobState.SUCCEEDED)
                .order_by(JobModel.job_id.desc())
            )
            return list(s.scalars(q).all())

    @retry_db
    def latest_job_named(self, name: str) -> int | None:
        """The newest job with this name (a recorder resumes its own job)."""
        with self.session() as s:
            q = select(JobModel.job_id).where(JobModel.name == name)
            return s.scalars(q.order_by(JobModel.job_id.desc())).first()

    @retry_db
    def set_trial_budget(self, job_id: int, n_trials: int) -> None:
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            job.n_trials = n_trials

    @retry_db
    def start_job(self, job_id: int) -> JobModel:
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            job.state = JobState.RUNNING
            job.started_at = utcnow()
            return job

    @retry_db
    def end_job(self, job_id: int, state: str, error: str | None) -> None:
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is not None:
                job.state = state
                job.error = error
                job.finished_at = utcnow()

    @retry_db
    def count_launch(self, job_id: int, startup_s: float, *, confirm: bool = False) -> None:
        with self.session() as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise JobNotFound(f"job {job_id} not found")
            if confirm:
                job.confirm_launches += 1
            else:
                job.engine_launches += 1
            job.engine_startup_s += startup_s

    # ------------------------------------------------------------------ references

    @retry_db
    def reference_names(self, job_id: int) -> set[str]:
        with self.session() as s:
            q = select(ReferenceModel.name).where(ReferenceModel.job_id == job_id)
            return set(s.scalars(q))

    @retry_db
    def add_reference(self, row: ReferenceModel) -> None:
        with self.session() as s:
            s.add(row)

    @retry_db
    def references(self, job_id: int) -> list[ReferenceModel]:
        with self.session() as s:
            q = (
                select(ReferenceModel)
                .where(ReferenceModel.job_id == job_id)
                .order_by(ReferenceModel.name)
            )
            return list(s.scalars(q).all())
