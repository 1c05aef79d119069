"""Database access: one engine per URL, one scoped session, Alembic-managed schema.

Why Alembic with its own version table: Optuna's RDB storage shares the database and keeps its
own ``alembic_version``; ours is ``spectune_alembic_version`` so neither steps on the other.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from tuner._resources import migrations_dir
from tuner.storage._retry import retry_call

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
    "upgrade_command",
]

DEFAULT_DATABASE_URL = "sqlite:///spectune.db"
VERSION_TABLE = "spectune_alembic_version"
# Top-level in a checkout, tuner/_data/ in a wheel (tuner/_resources.py).
MIGRATIONS_DIR = migrations_dir()
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
    """One pooled engine per URL. On a server database (PostgreSQL) the pool tests each
    connection before use, so a server restart costs no failed query, and an unreachable
    host fails after ``connect_timeout`` seconds instead of hanging (unless the URL sets it)."""
    kwargs: dict = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs["pool_pre_ping"] = True
        if _is_postgresql(url) and "connect_timeout" not in make_url(url).query:
            kwargs["connect_args"] = {"connect_timeout": 10}
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _fk_on(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    return engine


def _is_postgresql(url: str) -> bool:
    try:
        return make_url(url).get_backend_name() == "postgresql"
    except ArgumentError:
        return False


def shown_url(url: str) -> str:
    """The URL as messages may show it: the password masked (API clients and logs see
    these messages), quoted for a shell."""
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        shown = url
    return shlex.quote(shown)


def upgrade_command(url: str) -> str:
    """The command that brings ``url`` to this SpecTune's schema, as an error message says it."""
    cmd = f"spectune db upgrade --db {shown_url(url)}"
    if "***" in cmd and "***" not in url:
        cmd += " (with the real password for ***)"
    return cmd


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


# Alembic's ``context`` and ``op`` are module globals: two threads migrating at once (the API's
# start-up and its embedded worker) would run each other's scripts. Across processes,
# PostgreSQL's advisory lock in migrations/env.py orders them, and on SQLite an flock on the
# database file (independent of SQLite's own fcntl locks, so it never blocks a query).
_MIGRATING = threading.Lock()


@contextmanager
def _migration_lock(url: str) -> Iterator[None]:
    path = _sqlite_file(url)
    with _MIGRATING:
        if path is None:
            yield
            return
        try:
            f = open(path, "ab")  # held open while the lock is
        except OSError:  # read-only: nobody migrates it; SQLite itself reports the rest
            yield
            return
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield


def _upgrade_locked(url: str, revision: str) -> None:
    from alembic import command

    command.upgrade(_alembic_config(url), revision)


def upgrade(url: str, revision: str = "head") -> None:
    with _migration_lock(url):
        _upgrade_locked(url, revision)


def _optuna_schema(url: str) -> None:
    """Optuna's tables and its version row, made with SpecTune's, under the migration lock:
    two processes making their first Optuna storage on a new database at once both inserted
    Optuna's version row, and one failed (a UNIQUE constraint on ``alembic_version``: the
    server starting while a test made a job, tests/api/test_ui_races.py)."""
    storage = retry_call(
        lambda: optuna.storages.RDBStorage(url),
        # another process is making them (PostgreSQL: no shared lock here; Optuna writes
        # its version rows one at a time)
        retry_if=lambda e: isinstance(e, SQLAlchemyError | optuna.exceptions.StorageInternalError),
        for_s=3.0,
    )
    storage.engine.dispose()


def ensure_schema(url: str) -> None:
    """Create the schema in a new database; refuse (with the fix) one at an older revision.

    Anything but head is looked at again under the migration lock: another process may be
    migrating right now (on SQLite its tables, and each revision it passes, show at once)."""
    head = head_revision()
    if _revision(url) == head:
        return
    with _migration_lock(url):
        # Tables before revision: on PostgreSQL another process's migration commits its tables
        # and its version row at once (the lock above is only this process's), so tables seen
        # here mean the revision read next is that migration's, not None.
        tables = set(inspect(get_engine(url)).get_table_names())
        rev = _revision(url)
        if rev is None:
            if tables & SPECTUNE_TABLES:
                raise SchemaOutOfDate(
                    f"database {shown_url(url)} has SpecTune tables but no "
                    f"{VERSION_TABLE}; it was not made by this version of SpecTune"
                )
            _optuna_schema(url)  # first: a database at head has Optuna's tables too
            _upgrade_locked(url, "head")
            return
    if rev != head:
        raise SchemaOutOfDate(
            f"database schema is at revision {rev}, this SpecTune needs {head}. "
            f"Run: {upgrade_command(url)}"
        )


def _revision(url: str) -> str | None:
    """``current_revision``, with a failure to connect as a StorageError naming the database."""
    try:
        return current_revision(url)
    except SQLAlchemyError as e:
        raise StorageError(f"cannot open database {shown_url(url)}: {e}") from e


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
