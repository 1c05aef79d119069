"""Persistent results: the ``Store`` (the only code that opens a database session; each of
its public methods retries a lost connection or says why not), its SQLAlchemy models, the
trial read model and the Alembic-managed schema."""

from tuner.states import JOB_ENDED, TRIAL_FINISHED, JobState, TrialState
from tuner.storage._counts import ServiceCounts
from tuner.storage._db import (
    DEFAULT_DATABASE_URL,
    MIGRATIONS_DIR,
    VERSION_TABLE,
    SchemaOutOfDate,
    StorageError,
    current_revision,
    database_problem,
    database_url,
    ensure_schema,
    get_engine,
    head_revision,
    upgrade,
)
from tuner.storage._models import (
    Base,
    JobModel,
    MeasurementModel,
    ReferenceModel,
    TrialModel,
    utcnow,
)
from tuner.storage._records import (
    TrialRecord,
    named_constraints,
    prediction_point,
    read_search_note,
    retried_number,
    search_launch,
)
from tuner.storage._retry import RETRY_FOR_S, ResilientRDBStorage, is_disconnect, retry_call
from tuner.storage._store import (
    CancelResult,
    JobNotFound,
    SpaceRefused,
    Store,
    job_id_of_study,
    space_of_job,
    study_name_for,
)
from tuner.storage._stored_space import space_refusal
from tuner.storage._tokens import (
    TOKEN_PREFIX,
    ApiTokenModel,
    TokenError,
    TokenInfo,
    TokenNotFound,
)
from tuner.storage._trials import LOG_TAIL_CHARS, TrialNotFound
from tuner.storage._watches import WatchInfo, WatchModel, WatchNotFound

__all__ = [
    "RETRY_FOR_S",
    "is_disconnect",
    "retry_call",
    "JOB_ENDED",
    "TRIAL_FINISHED",
    "JobState",
    "TrialState",
    "ServiceCounts",
    "TOKEN_PREFIX",
    "ApiTokenModel",
    "TokenError",
    "TokenInfo",
    "TokenNotFound",
    "DEFAULT_DATABASE_URL",
    "LOG_TAIL_CHARS",
    "MIGRATIONS_DIR",
    "VERSION_TABLE",
    "Base",
    "CancelResult",
    "JobModel",
    "JobNotFound",
    "MeasurementModel",
    "ReferenceModel",
    "SchemaOutOfDate",
    "SpaceRefused",
    "StorageError",
    "ResilientRDBStorage",
    "Store",
    "TrialModel",
    "TrialNotFound",
    "TrialRecord",
    "retried_number",
    "current_revision",
    "database_problem",
    "database_url",
    "ensure_schema",
    "get_engine",
    "head_revision",
    "job_id_of_study",
    "named_constraints",
    "prediction_point",
    "read_search_note",
    "search_launch",
    "space_of_job",
    "space_refusal",
    "study_name_for",
    "upgrade",
    "WatchInfo",
    "WatchModel",
    "WatchNotFound",
    "utcnow",
]
