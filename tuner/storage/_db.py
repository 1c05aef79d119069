"""Database access: one engine per URL, one scoped session, Alembic-managed schema.

Why Alembic with its own version table: Optuna's RDB storage shares the database and keeps its
own ``alembic_version``; ours is ``spectune_alembic_version`` so neither steps on the other.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

__all__ = [
    "DEFAULT_DATABASE_URL",
    "MIGRATIONS_DIR",
    "SchemaOutOfDate",
    "StorageError",
    "VERSION_TABLE",
    "current_revision",
    "database_problem",
    "database_url",
    "ensure_schema",
    "get_engine",
    "head_revision",
    "session_scope",
    "upgrade",
]

DEFAULT_DATABASE_URL = "sqlite:///spectune.db"
VERSION_TABLE = "spectune_alembic_version"
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# The tables a SpecTune database has at every revision.
SPECTUNE_TABLES = frozenset({"spectune_jobs", "spectune_trials", "spectune_measurements"})


class StorageError(RuntimeError):
    """A database operation failed; the original SQLAlchemy error is the cause."""


class SchemaOutOfDate(StorageError):
    pass


def database_url(explicit: str | None = None) -> str:
    """``--db`` beats ``SPECTUNE_DATABASE_URL`` beats ``sqlite:///spectune.db`` (working dir)."""
    return explicit or os.environ.get("SPECTUNE_DATABASE_URL") or DEFAULT_DATABASE_URL


@lru_cache(maxsize=8)
def get_engine(url: str) -> Engine:
    kwargs: dict = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _fk_on(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    return engine


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """Commit on success, roll back on any error; DB errors surface as StorageError."""
    session = sessionmaker(bind=get_engine(url), expire_on_commit=False)()
    try:
        yield session
        session.commit()
    except SQLAlchemyError as e:
        session.rollback()
        raise StorageError(f"database error: {e}") from e
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["version_table"] = VERSION_TABLE
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def current_revision(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with get_engine(url).connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(_alembic_config(url), revision)


def ensure_schema(url: str) -> None:
    """Create the schema in a new database; refuse (with the fix) one at an older revision."""
    rev = current_revision(url)
    if rev is None:
        tables = set(inspect(get_engine(url)).get_table_names())
        if tables & SPECTUNE_TABLES:
            raise SchemaOutOfDate(
                f"database {url} has SpecTune tables but no {VERSION_TABLE}; it was not made "
                "by this version of SpecTune"
            )
        upgrade(url)
        return
    head = head_revision()
    if rev != head:
        raise SchemaOutOfDate(
            f"database schema is at revision {rev}, this SpecTune needs {head}. "
            f"Run: spectune db upgrade --db {url}"
        )


def _sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL (None for another backend or an in-memory database)."""
    try:
        u = make_url(url)
    except ArgumentError:
        return None
    db = u.database
    if u.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db


def _fresh_readonly(path: str) -> Engine:
    """A connection to the file as it is on disk now, never creating it: a pooled connection
    keeps answering from a file deleted under it."""
    uri = f"file:{quote(path)}?mode=ro"
    return create_engine(
        "sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, timeout=5), poolclass=NullPool
    )


def database_problem(url: str) -> str | None:
    """Why the database cannot serve this SpecTune right now (gone, unreachable, no schema, an
    older schema), or None. For ``/readyz``: it reads, never writes or creates."""
    path = _sqlite_file(url)
    if path is not None and not Path(path).is_file():
        return f"database file {Path(path).name} is missing"
    engine = _fresh_readonly(path) if path is not None else get_engine(url)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            if VERSION_TABLE not in tables or not SPECTUNE_TABLES <= tables:
                return "database schema is missing (not a SpecTune database)"
            rev = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    except SQLAlchemyError as e:
        return f"database: {type(e).__name__}"
    finally:
        if path is not None:
            engine.dispose()
    head = head_revision()
    if rev != head:
        return f"database schema at {rev}, need {head}"
    return None
