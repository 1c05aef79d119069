"""Make the committed old-schema databases: ``tests/assets/v<revision>.db``.

Why: an upgrade test is only worth something on a database as an old SpecTune left it. Each
file holds Alembic's schema at that revision (made by running the migrations up to it, not
today's models) and one job a killed ``spectune run`` left behind: two trials finished and
measured, a third started and never finished, the job still ``running``, with its Optuna
study beside it. The rows are what SpecTune writes, restricted to the columns that revision
has. The job's models live in ``SPACE_DIR``, a fixed folder that ``space_dir()`` makes again
wherever a test resumes the job: the same machine and folder, as a user would resume it.

Run from the repository root (rewrites the files; results differ run to run, shapes do not)::

    .venv/bin/python -m tests.assets.make_old_databases

The committed files were made with the code of the v0.4.0.a release (commit 17712a6, a
``git archive`` of it with this script copied in), so the stored space is in that release's
format; run it that way again, with the release of the newest revision, to remake them.

``build_old_database`` also makes such a database on PostgreSQL (tests/storage).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, Table, create_engine, insert, select, text
from sqlalchemy.pool import NullPool

from tests.fake_space import _space, make_space_dir
from tests.helpers import fake_measurers
from tuner.job import create_job, run_job
from tuner.storage import (
    Base,
    JobModel,
    Store,
    TrialModel,
    get_engine,
    study_name_for,
    upgrade,
    utcnow,
)

ASSETS = Path(__file__).resolve().parent
FAKE_LAUNCHER = [sys.executable, str(ASSETS.parent / "fake_openai_server.py")]
REVISIONS = ("v0.1.0.a", "v0.3.0.a", "v0.4.0.a")
TRIALS = 4  # the job's budget
DONE = 2  # trials finished before the process died; the next one was left running
SPACE_DIR = Path("/tmp/spectune-old-databases/space")
# Our tables in foreign-key order (later ones point at earlier ones).
TABLES = ("spectune_jobs", "spectune_trials", "spectune_measurements", "spectune_references")


def space_dir() -> Path:
    """``SPACE_DIR`` with the FAKE models in it; made once, safe to race with another run."""
    if (SPACE_DIR / "target").is_dir():
        return SPACE_DIR
    SPACE_DIR.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=SPACE_DIR.parent))
    make_space_dir(tmp / "space")
    try:
        os.rename(tmp / "space", SPACE_DIR)
    except OSError:
        if not (SPACE_DIR / "target").is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return SPACE_DIR


def _run_interrupted_job(url: str, space_dir: Path, work_dir: Path) -> int:
    """A job of ``TRIALS`` trials as a killed process leaves it after ``DONE`` of them."""
    store = Store(url)
    job_id = create_job(store, _space(space_dir, trials=TRIALS, confirm=0))
    store.set_trial_budget(job_id, DONE)
    run_job(store, job_id, work_dir=work_dir, measurers=fake_measurers(FAKE_LAUNCHER))
    orphan = store.load_study(job_id).ask()  # the trial the process was killed in
    died = utcnow() - timedelta(hours=1)  # long enough ago for any resume to call it dead
    with get_engine(url).begin() as conn:
        conn.execute(
            text(
                "UPDATE trials SET datetime_start = :t WHERE number = :n AND study_id = "
                "(SELECT study_id FROM studies WHERE study_name = :s)"
            ),
            {"t": died, "n": orphan.number, "s": study_name_for(job_id)},
        )
    with store.session() as s:
        job = s.get(JobModel, job_id)
        assert job is not None
        job.n_trials, job.state, job.finished_at = TRIALS, "running", None
        s.add(
            TrialModel(
                job_id=job_id,
                number=orphan.number,
                state="running",
                method="none",
                params={"method": "none"},
                engine_config={},
                engine_key="killed",
                started_at=died,
            )
        )
    return job_id


def _rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """Our rows as today's models read them."""
    with get_engine(url).connect() as conn:
        return {
            name: [dict(r._mapping) for r in conn.execute(select(Base.metadata.tables[name]))]
            for name in TABLES
            if name in Base.metadata.tables
        }


def _rebuild_at(url: str, revision: str, rows: dict[str, list[dict[str, Any]]]) -> None:
    """Drop our tables (Optuna's stay), migrate up to ``revision``, put the rows back."""
    get_engine(url).dispose()
    engine = create_engine(url, poolclass=NullPool)
    ours = MetaData()
    ours.reflect(engine, only=lambda name, _meta: name.startswith("spectune_"))
    ours.drop_all(engine)
    upgrade(url, revision)
    old = MetaData()
    with engine.begin() as conn:
        for name in TABLES:
            if not rows.get(name) or not engine.dialect.has_table(conn, name):
                continue
            table = Table(name, old, autoload_with=conn)
            keep = [{k: v for k, v in r.items() if k in table.c} for r in rows[name]]
            conn.execute(insert(table), keep)
            if engine.dialect.name == "postgresql":  # ids were given: move the sequence on
                pk = next(iter(table.primary_key.columns)).name
                conn.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{name}', '{pk}'), "
                        f"(SELECT max({pk}) FROM {name}))"
                    )
                )
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.execute(text("VACUUM"))
    engine.dispose()


def build_old_database(url: str, revision: str, work_dir: Path) -> int:
    """Fill the empty database ``url`` as SpecTune at ``revision`` left it; the job's id."""
    job_id = _run_interrupted_job(url, space_dir(), work_dir / "work")
    _rebuild_at(url, revision, _rows(url))
    return job_id


def main() -> None:
    for revision in REVISIONS:
        out = ASSETS / f"{revision}.db"
        out.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            build_old_database(f"sqlite:///{out}", revision, Path(tmp))
        print(f"{out.relative_to(Path.cwd())}: {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
