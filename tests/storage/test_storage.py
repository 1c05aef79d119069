from __future__ import annotations

import optuna
import pytest
from sqlalchemy import create_engine, inspect, text

from tuner.storage import (
    VERSION_TABLE,
    SchemaOutOfDate,
    StorageError,
    Store,
    current_revision,
    ensure_schema,
    head_revision,
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
        with Store(db_url).session() as s:
            s.add(JobModel(name="a", study_name="dup", space={}, n_trials=1))
            s.flush()
            s.add(JobModel(name="b", study_name="dup", space={}, n_trials=1))
            s.flush()
    with Store(db_url).session() as s:
        assert s.query(JobModel).count() == 0  # nothing stored half-way


def test_real_v0_2_0_a_database_upgrades_and_keeps_its_results(tmp_path):
    """tests/assets/v0.2.0.a.db is the database of a real `make demo` run (10 trials on vLLM
    CPU) written by schema v0.2.0.a. Upgrading it must keep every result readable."""
    import json
    import shutil
    from pathlib import Path

    from tests.conftest import trial_records
    from tuner import cli
    from tuner.pareto import job_report
    from tuner.storage import upgrade

    src = Path(__file__).resolve().parents[1] / "assets" / "v0.2.0.a.db"
    db = tmp_path / "old.db"
    shutil.copy(src, db)
    url = f"sqlite:///{db}"
    assert current_revision(url) == "v0.2.0.a"
    with pytest.raises(SchemaOutOfDate, match="spectune db upgrade"):
        ensure_schema(url)
    upgrade(url)
    assert current_revision(url) == head_revision()
    recs = trial_records(url, 1)
    assert len(recs) == 10 and recs[0]["method"] == "none"
    assert all(r["state"] == "complete" for r in recs)
    assert recs[1]["acceptance_rate"] > 0 and recs[1]["lossless_match_rate"] is None
    rep = job_report(Store(url), 1)
    assert rep.baseline is not None and rep.winner is not None
    assert rep.verdicts  # the round-cost verdict works on numbers stored before it existed
    assert cli.main(["export", "1", "--format", "vllm-json", "--db", url]) == 0
    optuna_study = optuna.load_study(study_name="spectune-job-1", storage=url)
    assert len(optuna_study.trials) == 10
    json.dumps(recs)  # still serialisable for `spectune trials --json`
