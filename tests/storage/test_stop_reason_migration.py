"""Migration v0.9.0.a (why a job stopped, the offline prices it used) on real old
databases: the columns appear empty, every old row reads back unchanged, an old job can be
given a stop reason (which closes its search) and prices, and the downgrade removes only the
new columns."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect

from tests.storage.test_upgrades import ASSETS, _snapshot
from tuner.storage import Store, current_revision, get_engine, upgrade
from tuner.storage._db import _alembic_config


def _job_columns(url: str) -> set[str]:
    get_engine(url).dispose()
    return {c["name"] for c in inspect(get_engine(url)).get_columns("spectune_jobs")}


@pytest.mark.parametrize("old", ["v0.1.0.a", "v0.4.0.a"])
def test_stop_reason_is_added_to_an_old_database(tmp_path: Path, old: str) -> None:
    db = tmp_path / "old.db"
    shutil.copy(ASSETS / f"{old}.db", db)
    url = f"sqlite:///{db}"
    upgrade(url, "v0.8.0.a")
    assert not {"stop_reason", "offline_prices"} & _job_columns(url)
    before = {k: v for k, v in _snapshot(url).items() if v}
    upgrade(url, "v0.9.0.a")
    assert current_revision(url) == "v0.9.0.a"
    assert {"stop_reason", "offline_prices"} <= _job_columns(url)
    kept = {name: list(next(iter(rows.values()))) for name, rows in before.items()}
    assert _snapshot(url, kept) == before
    job = next(iter(before["spectune_jobs"]))
    row = _snapshot(url)["spectune_jobs"][job]
    assert row["stop_reason"] is None and row["offline_prices"] is None
    Store(url).set_stop_reason(job, "trial budget spent")
    Store(url).set_offline_prices(job, {"by_proposer": {}, "unpriced": {"x": "why"}})
    row = _snapshot(url)["spectune_jobs"][job]
    assert row["stop_reason"] == "trial budget spent"
    assert row["offline_prices"] == {"by_proposer": {}, "unpriced": {"x": "why"}}
    assert Store(url).trial_slots_left(job) == 0  # a stop reason closes the search

    get_engine(url).dispose()
    command.downgrade(_alembic_config(url), "v0.8.0.a")
    assert not {"stop_reason", "offline_prices"} & _job_columns(url)
    assert _snapshot(url, kept) == before
