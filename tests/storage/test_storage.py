from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.pool import NullPool

from tuner import cli
from tuner.storage import (
    VERSION_TABLE,
    SchemaOutOfDate,
    StorageError,
    Store,
    current_revision,
    database_problem,
    ensure_schema,
    head_revision,
    upgrade,
)
from tuner.storage._db import upgrade_command
from tuner.storage._models import JobModel

REPO = Path(__file__).resolve().parents[2]


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

    from tests.helpers import trial_records
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


def test_stale_schema_message_names_the_exact_upgrade_command(db_url):
    upgrade(db_url, "v0.2.0.a")
    with pytest.raises(SchemaOutOfDate) as e:
        ensure_schema(db_url)
    assert str(e.value).endswith(f"Run: spectune db upgrade --db {db_url}")
    assert database_problem(db_url) == f"database schema at v0.2.0.a, need {head_revision()}"
    assert cli.main(["db", "upgrade", "--db", db_url]) == 0  # the command does fix it
    ensure_schema(db_url)
    assert database_problem(db_url) is None


def test_the_upgrade_command_hides_the_password_and_quotes_the_url():
    url = "postgresql://u:s3cret@db.internal:5432/spectune?sslmode=require&application_name=x"
    cmd = upgrade_command(url)
    assert "s3cret" not in cmd
    assert cmd.startswith(
        "spectune db upgrade --db 'postgresql://u:***@db.internal:5432/spectune?"
    )
    assert cmd.endswith("(with the real password for ***)")
    assert upgrade_command("sqlite:////tmp/x.db") == "spectune db upgrade --db sqlite:////tmp/x.db"


def test_an_unreachable_server_is_a_storage_error_naming_the_database():
    url = "postgresql://spectune:pw@127.0.0.1:1/spectune"  # nothing listens on port 1
    with pytest.raises(StorageError, match=re.escape("cannot open database")) as e:
        ensure_schema(url)
    assert "postgresql://spectune:***@127.0.0.1:1/spectune" in str(e.value)
    assert "pw@" not in str(e.value)
    assert database_problem(url) == "database: OperationalError"


def test_processes_starting_on_a_new_database_at_once_all_find_the_schema(db_url):
    """A service and its workers started together each migrate a new database; on
    PostgreSQL the later ones wait for the first (migrations/env.py) and find it done."""
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            ensure_schema(db_url)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and current_revision(db_url) == head_revision()


def test_processes_migrating_a_new_database_at_once_take_turns(db_url):
    code = "import sys; from tuner.storage import ensure_schema; ensure_schema(sys.argv[1])"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, db_url],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 3, outs
    assert current_revision(db_url) == head_revision()


def test_a_migration_committing_between_the_two_reads_is_found_done(db_url, monkeypatch):
    """Another process's migration commits its tables and version row at once, possibly
    between this process's two reads under the lock (CI saw it on PostgreSQL): whichever
    read comes first, the schema it then finds is taken as done, not as foreign tables."""
    from tuner.storage import _db

    real_revision, real_inspect = _db._revision, _db.inspect
    calls = {"revision": 0, "inspect": 0, "migrated": False}

    def other_process_migrates() -> None:
        if not calls["migrated"]:
            calls["migrated"] = True
            _db._upgrade_locked(db_url, "head")  # the other process holds no lock of ours

    def revision(url: str):
        calls["revision"] += 1
        rev = real_revision(url)
        if calls["revision"] == 2:  # the first read under the lock
            other_process_migrates()
        return rev

    def inspect_(bind):
        calls["inspect"] += 1
        insp = real_inspect(bind)
        tables = insp.get_table_names()
        other_process_migrates()
        return type("Tables", (), {"get_table_names": staticmethod(lambda: tables)})()

    monkeypatch.setattr(_db, "_revision", revision)
    monkeypatch.setattr(_db, "inspect", inspect_)
    ensure_schema(db_url)
    assert calls["migrated"] and current_revision(db_url) == head_revision()


def test_every_migration_runs_down_and_up_again(db_url):
    """Each revision's downgrade undoes it on this backend, so the chain can be walked back."""
    from alembic import command

    from tuner.storage._db import _alembic_config

    ensure_schema(db_url)
    command.downgrade(_alembic_config(db_url), "base")
    assert current_revision(db_url) is None
    tables = set(inspect(create_engine(db_url, poolclass=NullPool)).get_table_names())
    assert not {t for t in tables if t.startswith("spectune_") and t != VERSION_TABLE}
    upgrade(db_url)
    assert current_revision(db_url) == head_revision() and database_problem(db_url) is None


def test_a_new_database_gets_optunas_version_rows_with_the_schema(any_db_url):
    """Made under the migration lock, not by whichever process makes its first Optuna
    storage: two at once both inserted Optuna's version row, and one failed."""
    ensure_schema(any_db_url)
    engine = create_engine(any_db_url, poolclass=NullPool)
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM version_info")).scalar() == 1
        assert c.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    engine.dispose()
