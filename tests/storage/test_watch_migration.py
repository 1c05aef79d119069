"""Migration v0.8.0.a (watches) on an old database: the table appears with its columns,
every old row reads back unchanged, a watch can be stored for the old job, and the
downgrade removes only the new table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect

from tests.storage.test_upgrades import ASSETS, _snapshot
from tuner.storage import Store, current_revision, get_engine, upgrade
from tuner.storage._db import _alembic_config

COLUMNS = {
    "watch_id",
    "job_id",
    "url",
    "interval_s",
    "created_at",
    "checked_at",
    "verdict",
    "last_result",
    "last_error",
}


def _tables(url: str) -> set[str]:
    get_engine(url).dispose()
    return set(inspect(get_engine(url)).get_table_names())


@pytest.mark.parametrize("old", ["v0.1.0.a", "v0.4.0.a"])
def test_watches_table_is_added_to_an_old_database(tmp_path: Path, old: str) -> None:
    db = tmp_path / "old.db"
    shutil.copy(ASSETS / f"{old}.db", db)
    url = f"sqlite:///{db}"
    upgrade(url, "v0.7.0.a")
    assert "spectune_watches" not in _tables(url)
    before = {k: v for k, v in _snapshot(url).items() if v}
    upgrade(url, "v0.8.0.a")
    assert current_revision(url) == "v0.8.0.a"
    cols = {c["name"] for c in inspect(get_engine(url)).get_columns("spectune_watches")}
    assert cols == COLUMNS
    kept = {name: list(next(iter(rows.values()))) for name, rows in before.items()}
    assert _snapshot(url, kept) == before
    upgrade(url)  # today's Store reads today's schema
    job = next(iter(before["spectune_jobs"]))
    w = Store(url).create_watch(job, "http://127.0.0.1:8000", 60.0)
    Store(url).record_watch(w.id, verdict="still pays", result={"x": 1}, error=None)
    assert Store(url).watch(w.id).last_result == {"x": 1}

    get_engine(url).dispose()
    command.downgrade(_alembic_config(url), "v0.7.0.a")
    assert "spectune_watches" not in _tables(url)
    assert _snapshot(url, kept) == before
