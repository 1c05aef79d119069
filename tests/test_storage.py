from __future__ import annotations

import optuna
import pytest
from sqlalchemy import create_engine, inspect, text

from tuner.storage import (
    VERSION_TABLE,
    SchemaOutOfDate,
    StorageError,
    current_revision,
    ensure_schema,
    head_revision,
    session_scope,
)
from tuner.storage._models import JobModel


def test_new_database_gets_our_schema_beside_optunas(db_url):
    optuna.create_study(storage=db_url, study_name="s")  # Optuna first, in the same file
    ensure_schema(db_url)
    assert current_revision(db_url) == head_revision()
    tables = set(inspect(create_engine(db_url)).get_table_names())
    assert {"spectune_jobs", "spectune_trials", "spectune_measurements", VERSION_TABLE} <= tables
    assert {"studies", "trials", "alembic_version"} <= tables  # Optuna's are untouched
    optuna.load_study(storage=db_url, study_name="s")
    ensure_schema(db_url)  # idempotent


def test_foreign_tables_without_version_are_refused(db_url):
    eng = create_engine(db_url)
    with eng.begin() as c:
        c.execute(text("CREATE TABLE spectune_jobs (x INTEGER)"))
    with pytest.raises(SchemaOutOfDate, match="not made by this version"):
        ensure_schema(db_url)


def test_older_revision_is_refused_with_the_fix(db_url):
    ensure_schema(db_url)
    with create_engine(db_url).begin() as c:
        c.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = 'v0.0.1.old'"))
    with pytest.raises(SchemaOutOfDate, match="spectune db upgrade"):
        ensure_schema(db_url)


def test_session_scope_rolls_back_and_wraps_db_errors(db_url):
    ensure_schema(db_url)
    with pytest.raises(StorageError):
        with session_scope(db_url) as s:
            s.add(JobModel(name="a", study_name="dup", space={}, n_trials=1))
            s.flush()
            s.add(JobModel(name="b", study_name="dup", space={}, n_trials=1))
            s.flush()
    with session_scope(db_url) as s:
        assert s.query(JobModel).count() == 0  # nothing stored half-way
