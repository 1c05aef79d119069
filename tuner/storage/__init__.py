"""Persistent results: SQLAlchemy models and the scoped session."""

from tuner.storage._db import (
    DEFAULT_DATABASE_URL,
    MIGRATIONS_DIR,
    VERSION_TABLE,
    SchemaOutOfDate,
    StorageError,
    current_revision,
    database_url,
    ensure_schema,
    get_engine,
    head_revision,
    session_scope,
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

__all__ = [
    "DEFAULT_DATABASE_URL",
    "MIGRATIONS_DIR",
    "VERSION_TABLE",
    "Base",
    "JobModel",
    "MeasurementModel",
    "ReferenceModel",
    "SchemaOutOfDate",
    "StorageError",
    "TrialModel",
    "current_revision",
    "database_url",
    "ensure_schema",
    "get_engine",
    "head_revision",
    "session_scope",
    "upgrade",
    "utcnow",
]
