"""SQLAlchemy 2 models. Tables are prefixed ``spectune_``: Optuna's own ``studies`` and
``trials`` live in the same database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from tuner.states import JobState, TrialState

__all__ = ["Base", "JobModel", "MeasurementModel", "ReferenceModel", "TrialModel", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class JobModel(Base):
    """One tuning job: an Optuna study plus the search space it was started with."""

    __tablename__ = "spectune_jobs"
    __table_args__ = (
        UniqueConstraint("idempotency_key", name="uq_spectune_jobs_idempotency_key"),
        Index("ix_spectune_jobs_state", "state"),
    )

    job_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    study_name: Mapped[str] = mapped_column(String(200), unique=True)
    state: Mapped[str] = mapped_column(String(20), default=JobState.QUEUED)
    space: Mapped[dict[str, Any]] = mapped_column(JSON)
    space_yaml: Mapped[str | None] = mapped_column(Text, nullable=True)
    n_trials: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    engine_launches: Mapped[int] = mapped_column(Integer, default=0)
    engine_startup_s: Mapped[float] = mapped_column(Float, default=0.0)
    # Service columns (migration v0.2.0.a). ``for_worker``: submitted through the API, so a
    # worker may claim it; jobs from ``spectune run`` are run by their own process instead.
    for_worker: Mapped[bool] = mapped_column(Boolean, default=False)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    claimed_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # Launches made after the search to confirm the front (migration v0.3.0.a); the search
    # itself launches each distinct engine configuration at most once (engine_launches).
    confirm_launches: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Trial slots taken from the budget by all the workers sharing the job (v0.5.0.b): an
    # atomic ``UPDATE … WHERE trials_started < n_trials`` gives each slot to one worker.
    trials_started: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Why the search stopped (v0.9.0.a): set when it closes -- no worker takes another trial
    # slot then -- and completed with the confirmation's outcome when the job ends.
    stop_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The offline prices the guided search used (v0.9.0.a; ``OfflinePrices.to_json``):
    # predictions, shown for every proposer, launched or not.
    offline_prices: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    trials: Mapped[list[TrialModel]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="TrialModel.number"
    )
    references: Mapped[list[ReferenceModel]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="ReferenceModel.name"
    )


class TrialModel(Base):
    """One candidate configuration; ``state`` uses Optuna's names in lower case."""

    __tablename__ = "spectune_trials"
    __table_args__ = (UniqueConstraint("job_id", "number"),)

    trial_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("spectune_jobs.job_id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20), default=TrialState.RUNNING)
    method: Mapped[str] = mapped_column(String(40))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    engine_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    engine_key: Mapped[str] = mapped_column(String(32))
    fail_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    fail_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    startup_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    reused_from: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Lossless guard and memory (migration v0.3.0.a).
    lossless_match_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    greedy_token_ids: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    kv_cache_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    peak_rss_mb: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Which worker ran it, on which devices (v0.5.0.b).
    worker_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    devices: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # How the search proposed it, its prediction (never a measurement) and the class member
    # it was launched as (v0.5.0.c).
    search: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Lossless under sampling (v0.6.0.a): the distribution check's continuations and the
    # candidate's p-value against the baseline's.
    sampled_token_ids: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    lossless_p_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    # A baseline's prompt and greedy output token ids of the workload (v0.7.0.a): what
    # every proposer is priced on before its launch ([[prompt ids], [output ids]] each).
    token_sequences: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)

    job: Mapped[JobModel] = relationship(back_populates="trials")
    measurements: Mapped[list[MeasurementModel]] = relationship(
        back_populates="trial",
        cascade="all, delete-orphan",
        order_by="MeasurementModel.concurrency",
    )


class MeasurementModel(Base):
    """One (configuration, workload, concurrency) point; the numbers live in ``metrics``."""

    __tablename__ = "spectune_measurements"
    __table_args__ = (UniqueConstraint("trial_id", "workload", "concurrency"),)

    measurement_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(
        ForeignKey("spectune_trials.trial_id", ondelete="CASCADE")
    )
    workload: Mapped[str] = mapped_column(String(100))
    concurrency: Mapped[int] = mapped_column(Integer)
    output_tok_per_s: Mapped[float] = mapped_column(Float)
    p99_tpot_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    num_failed: Mapped[int] = mapped_column(Integer, default=0)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    trial: Mapped[TrialModel] = relationship(back_populates="measurements")


class ReferenceModel(Base):
    """A hosted endpoint measured in a job (migration v0.4.0.a): a reference row, not a
    candidate. The API key's environment variable name is in the job's space; the key is not
    stored anywhere."""

    __tablename__ = "spectune_references"
    __table_args__ = (UniqueConstraint("job_id", "name"),)

    reference_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("spectune_jobs.job_id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    base_url: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(500))
    state: Mapped[str] = mapped_column(String(20))  # complete | fail
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    measurements: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    job: Mapped[JobModel] = relationship(back_populates="references")
