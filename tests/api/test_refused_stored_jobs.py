"""Jobs an older version stored with values today's rules refuse (issue 25, item 1).

A seed of -1, ``--trust-remote-code`` in ``engine.extra_args``, a depth over 64 and a
free-form ``dtype`` were once accepted. Such a job must never run, yet stay readable: its
job, trials and front answer without a 5xx (the refused fields read as today's defaults), its
export is a 409 naming the field, a cancel ends it, a worker claiming it fails it with the
reason (and goes on), ``spectune db upgrade`` fails it, and the CLI prints instead of a
traceback.

Each job replays the recorded tiny-cpu surface (nothing is launched); the refused value is
then written straight into ``spectune_jobs.space``, as the older version left it.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers import TINY_REPLAY_SPACE, TINY_SURFACE, make_settings
from tuner import cli
from tuner.api import create_app
from tuner.job import create_job, run_job
from tuner.space import loads_space
from tuner.states import JobState
from tuner.storage import JobModel, SpaceRefused, Store
from tuner.worker import Worker

REPO = Path(__file__).resolve().parents[2]
SPACE = TINY_REPLAY_SPACE.format(
    name="refused-later", surface=TINY_SURFACE, model="models/tiny/target", trials=4
)

Patch = Callable[[dict[str, Any]], None]


def _seed(d: dict[str, Any]) -> None:
    d["seed"] = -1


def _trust_remote_code(d: dict[str, Any]) -> None:
    d["engine"]["extra_args"] = ["--trust-remote-code"]


def _depth(d: dict[str, Any]) -> None:
    d["methods"]["ngram"]["num_speculative_tokens"] = {"min": 1, "max": 65}


def _dtype(d: dict[str, Any]) -> None:
    d["engine"]["dtype"] = "float16 --port 1"


# Each value today's schema refuses (tests/api/test_api_limits.py refuses them on submit),
# with the field its refusal names.
REFUSED = {
    "seed -1": (_seed, "seed"),
    "--trust-remote-code": (_trust_remote_code, "engine.extra_args.0"),
    "depth 65": (_depth, "methods.ngram.num_speculative_tokens.max"),
    "free-form dtype": (_dtype, "engine.dtype"),
}


def _unreadable(d: dict[str, Any]) -> None:
    """Refused as a whole (no single field to drop): not even a lenient read works."""
    d["objective_concurrency"] = 64  # not one of the job's concurrency levels


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A database holding one finished 4-trial replay job (job 1), copied by each test."""
    root = tmp_path_factory.mktemp("template")
    store = Store(f"sqlite:///{root / 'spectune.db'}")
    space = loads_space(SPACE, base_dir=REPO)
    job_id = create_job(store, space, space_yaml=SPACE)
    assert run_job(store, job_id, work_dir=root / "work").state == JobState.SUCCEEDED
    return root / "spectune.db"


def _db(template: Path, root: Path) -> str:
    shutil.copy(template, root / "spectune.db")
    return f"sqlite:///{root / 'spectune.db'}"


def _store_refused(url: str, job_id: int, patch: Patch, **columns: Any) -> None:
    """Write the refused value into the stored space, as an older version would have."""
    with Store(url).session() as s:
        job = s.get(JobModel, job_id)
        assert job is not None
        data = copy.deepcopy(job.space)
        patch(data)
        job.space = data
        for k, v in columns.items():
            setattr(job, k, v)


def _stuck(url: str, patch: Patch) -> None:
    """Job 1 as the issue found it: ``running`` with no owner and no error."""
    _store_refused(
        url,
        1,
        patch,
        state=JobState.RUNNING,
        claimed_by=None,
        heartbeat_at=None,
        finished_at=None,
        for_worker=True,
    )


@pytest.fixture
def client(tmp_path: Path, template: Path):
    settings = make_settings(tmp_path, database_url=_db(template, tmp_path))
    with TestClient(create_app(settings, run_worker=False)) as c:
        yield c, settings.database_url


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_job_reads_exports_nothing_and_a_cancel_ends_it(client, case):
    c, url = client
    patch, field = REFUSED[case]
    before = c.get("/api/jobs/1/trials").json()
    assert before["total"] == 4
    _stuck(url, patch)

    job = c.get("/api/jobs/1")
    assert job.status_code == 200 and job.json()["state"] == "running"
    assert job.json()["workload"] == "code_completion"  # read, not blanked
    assert c.get("/api/jobs").status_code == 200
    trials = c.get("/api/jobs/1/trials")
    assert trials.status_code == 200 and trials.json() == before  # the measured trials stay
    one = c.get("/api/jobs/1/trials/0")
    assert one.status_code == 200 and one.json()["number"] == 0
    front = c.get("/api/jobs/1/pareto")
    assert front.status_code == 200, front.text
    assert front.json()["points"] and front.json()["winner_trial"] is not None
    for e in front.json()["winner_exports"]:
        assert e["available"] is False and field in e["reason"]
    for path in ("importance", "predictions"):
        assert c.get(f"/api/jobs/1/{path}").status_code < 500
    export = c.get("/api/jobs/1/export")
    assert export.status_code == 409, export.text
    assert export.headers["content-type"].startswith("application/problem+json")
    assert "no longer valid" in export.json()["detail"] and field in export.json()["detail"]

    # No worker of this version can run it: the cancel ends it at once.
    r = c.post("/api/jobs/1/cancel")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "cancelled" and field in r.json()["error"]
    assert c.get("/api/jobs/1").json()["state"] == "cancelled"
    assert c.post("/api/jobs/1/cancel").status_code == 409  # ended: the usual answer
    assert c.get("/api/jobs/1/trials").json() == before


def test_a_queued_refused_job_is_cancelled_at_once(client):
    c, url = client
    _store_refused(url, 1, _seed, state=JobState.QUEUED, for_worker=True)
    r = c.post("/api/jobs/1/cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"


def test_a_space_not_readable_even_with_defaults_is_a_409_and_its_trials_list(client):
    c, url = client
    before = c.get("/api/jobs/1/trials").json()
    _stuck(url, _unreadable)
    assert c.get("/api/jobs/1").status_code == 200
    trials = c.get("/api/jobs/1/trials")
    assert trials.status_code == 200 and trials.json()["total"] == before["total"]
    assert [t["params"] for t in trials.json()["items"]] == [t["params"] for t in before["items"]]
    assert c.get("/api/jobs/1/trials/0").status_code == 200
    for path in ("pareto", "export"):
        r = c.get(f"/api/jobs/1/{path}")
        assert r.status_code == 409 and "no longer valid" in r.json()["detail"], r.text
    assert c.post("/api/jobs/1/cancel").json()["state"] == "cancelled"


def test_a_worker_fails_a_refused_job_with_the_reason_and_goes_on(tmp_path, template):
    url = _db(template, tmp_path)
    store = Store(url)
    space = loads_space(SPACE, base_dir=REPO)
    queued = create_job(store, space, space_yaml=SPACE, n_trials=1)
    store.release_to_workers(queued, key=None, digest="x")
    _store_refused(url, queued, _seed)
    worker = Worker(store, work_dir=tmp_path / "work", poll_s=0.1)
    assert worker.run_once() == queued
    job = store.job(queued)
    assert job.state == JobState.FAILED and job.claimed_by is None
    assert job.error.startswith("stored search space no longer valid: seed: ")
    assert worker.run_once() is None  # not claimed again: no loop
    # A worker of the older version, if one still runs it, is told to stop.
    assert job.cancel_requested is True


def test_run_job_fails_a_resumed_refused_job(tmp_path, template):
    url = _db(template, tmp_path)
    _store_refused(url, 1, _depth, state=JobState.RUNNING)
    with pytest.raises(SpaceRefused, match=r"num_speculative_tokens\.max"):
        run_job(Store(url), 1, work_dir=tmp_path / "work")
    job = Store(url).job(1)
    assert job.state == JobState.FAILED and "num_speculative_tokens.max" in job.error
    assert len(Store(url).trial_records(1)) == 4  # its trials stay


def test_db_upgrade_fails_the_live_refused_jobs_and_leaves_the_rest(tmp_path, template, capsys):
    url = _db(template, tmp_path)
    store = Store(url)
    space = loads_space(SPACE, base_dir=REPO)
    queued_ok = create_job(store, space, space_yaml=SPACE)
    queued_bad = create_job(store, space, space_yaml=SPACE)
    _store_refused(url, queued_bad, _dtype)
    _stuck(url, _trust_remote_code)  # job 1
    capsys.readouterr()
    assert cli.main(["db", "upgrade", "--json", "--db", url]) == 0
    out, errs = capsys.readouterr()
    failed = {j["id"]: j["error"] for j in json.loads(out)["failed_jobs"]}
    assert set(failed) == {1, queued_bad}
    assert "engine.extra_args.0" in failed[1] and "engine.dtype" in failed[queued_bad]
    assert f"job {queued_bad} failed: stored search space no longer valid" in errs
    assert store.job(1).state == store.job(queued_bad).state == JobState.FAILED
    assert store.job(queued_ok).state == JobState.QUEUED
    assert len(store.trial_records(1)) == 4
    # Run again: nothing left to fail.
    assert cli.main(["db", "upgrade", "--json", "--db", url]) == 0
    assert json.loads(capsys.readouterr().out)["failed_jobs"] == []


def test_cli_reads_a_refused_job_with_a_warning_and_refuses_its_export(tmp_path, template, capsys):
    url = _db(template, tmp_path)
    capsys.readouterr()
    assert cli.main(["trials", "1", "--json", "--db", url]) == 0
    before = json.loads(capsys.readouterr().out)
    _store_refused(url, 1, _seed)
    for argv in (["trials", "1"], ["report", "1"]):
        rc = cli.main([*argv, "--json", "--db", url])
        out, errs = capsys.readouterr()
        assert rc in (0, 3), errs
        doc = json.loads(out)
        assert "Traceback" not in errs
        assert "warning: job 1: stored search space no longer valid: seed: " in errs
        if argv[0] == "trials":
            assert doc == before
    assert cli.main(["report", "1", "--db", url]) in (0, 3)
    assert "Traceback" not in capsys.readouterr().err
    assert cli.main(["export", "1", "--db", url]) == 2  # the input exit code
    out, errs = capsys.readouterr()
    assert out == "" and errs.count("\n") == 1
    assert errs.startswith("spectune: error: job 1: stored search space no longer valid: seed")
    # An interrupted run resumed: the job fails with the reason, and the command says why.
    _store_refused(url, 1, _seed, state=JobState.CANCELLED)
    work = ["--work-dir", str(tmp_path / "work")]
    assert cli.main(["resume", "1", "--db", url, *work]) == 2
    assert "no longer valid" in capsys.readouterr().err
    assert Store(url).job(1).state == JobState.FAILED
