"""Old databases, as old SpecTune versions left them, upgrade to head and go on working.

The SQLite files are committed (tests/assets/make_old_databases.py makes them); on PostgreSQL
the same kind of database is built at the test's start. Each holds a job a killed process left
half-way: after the upgrade its finished trials must read back unchanged, and the job resumes
and finishes its budget with the FAKE engine. "head" is whatever the migrations end at.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest
from sqlalchemy import MetaData, create_engine, select
from sqlalchemy.pool import NullPool

from tests.assets.make_old_databases import (
    DONE,
    REVISIONS,
    TRIALS,
    build_old_database,
    space_dir,
)
from tests.helpers import fake_measurers
from tuner import cli
from tuner.job import run_job
from tuner.pareto import job_report
from tuner.storage import (
    SchemaOutOfDate,
    Store,
    current_revision,
    database_problem,
    ensure_schema,
    get_engine,
    head_revision,
)

ASSETS = Path(__file__).resolve().parents[1] / "assets"
Snapshot = dict[str, dict[Any, dict[str, Any]]]


def _snapshot(url: str, columns: dict[str, list[str]] | None = None) -> Snapshot:
    """Every row of our tables by primary key, as stored (only ``columns`` when given)."""
    get_engine(url).dispose()
    engine = create_engine(url, poolclass=NullPool)
    meta = MetaData()
    meta.reflect(engine, only=lambda name, _m: name.startswith("spectune_"))
    out: Snapshot = {}
    with engine.connect() as conn:
        for name, table in meta.tables.items():
            if name.endswith("alembic_version") or (columns and name not in columns):
                continue
            cols = [table.c[c] for c in columns[name]] if columns else list(table.c)
            pk = next(iter(table.primary_key.columns))
            rows = conn.execute(select(*cols).order_by(pk))
            out[name] = {r._mapping[pk.name]: dict(r._mapping) for r in rows}
    engine.dispose()
    return out


def _optuna_values(url: str, job_id: int) -> dict[int, tuple[str, list[float] | None]]:
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=url)
    return {t.number: (t.state.name, t.values) for t in study.trials}


def _upgrade_and_resume(url: str, revision: str, tmp_path: Path, launcher: list[str]) -> None:
    assert current_revision(url) == revision
    if revision != head_revision():  # a stale schema is refused with the command that fixes it
        fix = f"Run: spectune db upgrade --db {url}"
        with pytest.raises(SchemaOutOfDate, match=re.escape(fix)):
            ensure_schema(url)
        assert database_problem(url) == f"database schema at {revision}, need {head_revision()}"
    before = {name: rows for name, rows in _snapshot(url).items() if rows}
    job_id = next(iter(before["spectune_jobs"]))
    optuna_before = _optuna_values(url, job_id)
    assert [s for s, _ in optuna_before.values()] == ["COMPLETE"] * DONE + ["RUNNING"]

    assert cli.main(["db", "upgrade", "--db", url]) == 0
    assert current_revision(url) == head_revision() and database_problem(url) is None
    cols = {name: list(next(iter(rows.values()))) for name, rows in before.items()}
    assert _snapshot(url, cols) == before  # every old value, byte for byte
    done = [r for r in Store(url).trial_records(job_id) if r.state == "complete"]
    assert len(done) == DONE and all(r.measurements for r in done)

    # The job resumes where the killed process left it, with the same models.
    space_dir()
    job = run_job(
        Store(url), job_id, work_dir=tmp_path / "work", measurers=fake_measurers(launcher)
    )
    assert job.state == "succeeded"
    after = _snapshot(url, cols)
    finished = [k for k, r in before["spectune_trials"].items() if r["state"] == "complete"]
    for k in finished:
        assert after["spectune_trials"][k] == before["spectune_trials"][k]
    for k, row in before["spectune_measurements"].items():
        assert after["spectune_measurements"][k] == row
    optuna_after = _optuna_values(url, job_id)
    assert all(optuna_after[n] == optuna_before[n] for n in range(DONE))
    assert optuna_after[DONE][0] == "FAIL"  # the trial the process died in
    records = {r.number: r for r in Store(url).trial_records(job_id)}
    assert (records[DONE].state, records[DONE].fail_reason) == ("fail", "interrupted")
    # the rest of the budget ran (the lost trial may be run again on top)
    new = [n for n, r in records.items() if n > DONE and r.state == "complete"]
    assert len(new) >= TRIALS - DONE - 1 and len(records) >= TRIALS
    # the report reads old and new trials alike (a repeat of a measured point is not one)
    points = {p.trial_number for p in job_report(Store(url), job_id).points}
    assert set(range(DONE)) | {n for n in new if records[n].reused_from is None} <= points


@pytest.mark.timeout(240)  # a resume that waits for the dead trial forever fails here
@pytest.mark.parametrize("revision", REVISIONS)
def test_old_sqlite_database_upgrades_and_its_interrupted_job_resumes(
    revision: str, tmp_path: Path, fake_launcher: list[str]
) -> None:
    db = tmp_path / "old.db"
    shutil.copy(ASSETS / f"{revision}.db", db)
    _upgrade_and_resume(f"sqlite:///{db}", revision, tmp_path, fake_launcher)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("revision", ["v0.1.0.a", "v0.2.0.a"])
def test_old_postgresql_database_upgrades_and_its_interrupted_job_resumes(
    revision: str, pg_url: str, tmp_path: Path, fake_launcher: list[str]
) -> None:
    build_old_database(pg_url, revision, tmp_path / "build")
    _upgrade_and_resume(pg_url, revision, tmp_path, fake_launcher)


def test_every_committed_old_database_is_at_its_named_revision() -> None:
    """The file names are the revisions the tests above say they are."""
    files = sorted(ASSETS.glob("v*.db"))
    assert {f.stem for f in files} >= set(REVISIONS)
    for f in files:
        assert current_revision(f"sqlite:///{f}") == f.stem
