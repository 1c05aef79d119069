"""One MLflow parent run per job, whatever the number of workers, and a parent that ends
with the job's state (a local file store; no engine runs)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

import mlflow
import pytest

from tests.fake_space import _space
from tuner.integrations import ENV_EXPERIMENT, ENV_TRACKING_URI, on_job_stopped
from tuner.integrations._mlflow import log_trial
from tuner.job import create_job
from tuner.storage import Store


@pytest.fixture
def mlflow_uri(space_dir, monkeypatch) -> str:
    uri = (space_dir / "mlruns").as_uri()
    monkeypatch.setenv(ENV_TRACKING_URI, uri)
    monkeypatch.setenv(ENV_EXPERIMENT, "parent-runs")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def _record(number: int) -> dict[str, Any]:
    record = dict(number=number, state="complete", method="ngram", params={"method": "ngram"})
    record.update(measurements=[], extra={})
    return record


def _runs(uri: str) -> tuple[list[Any], list[Any]]:
    """(parent runs, trial runs) of the experiment, deleted ones left out."""
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("parent-runs")
    if exp is None:
        return [], []
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags["spectune.trial"] == "job"]
    return parents, [r for r in runs if r.data.tags["spectune.trial"] != "job"]


def test_two_workers_racing_to_create_the_parent_share_one(
    space_dir, db_url, mlflow_uri, monkeypatch
):
    """Both workers search, find no parent and create one (the race, forced by a barrier on
    each side of the create): one parent survives and both trials land under it."""
    space = _space(space_dir, trials=2, confirm=0)
    job_id = create_job(Store(db_url), space)
    before, after = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)
    create = mlflow.tracking.MlflowClient.create_run
    # The experiment first: a file store can create two experiments of one name at once.
    mlflow.tracking.MlflowClient(tracking_uri=mlflow_uri).create_experiment("parent-runs")

    def racing_create(self, experiment_id, *args, **kwargs):
        parent = (kwargs.get("tags") or {}).get("spectune.trial") == "job"
        if parent:
            before.wait()  # both have searched and found nothing
        run = create(self, experiment_id, *args, **kwargs)
        if parent:
            after.wait()  # both parents exist before either looks again
        return run

    monkeypatch.setattr(mlflow.tracking.MlflowClient, "create_run", racing_create)
    # A worker is a process with its own Store and MLflow client: nothing shared in memory.
    workers = [
        threading.Thread(target=log_trial, args=(Store(db_url), job_id, space, _record(n)))
        for n in (0, 1)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not before.broken and not after.broken  # both did race
    parents, trials = _runs(mlflow_uri)
    assert len(parents) == 1
    assert sorted(r.data.tags["spectune.trial"] for r in trials) == ["0", "1"]
    for r in trials:
        assert r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id


def test_a_duplicate_parent_is_merged_into_the_first(space_dir, db_url, mlflow_uri):
    """A parent left twice (a lost race, a worker that logged before it saw the other's):
    the next worker to look keeps the earliest, moves the other's trials under it and
    deletes the other."""
    store = Store(db_url)
    space = _space(space_dir, trials=3, confirm=0)
    job_id = create_job(store, space)
    log_trial(store, job_id, space, _record(0))
    (first,), _ = _runs(mlflow_uri)
    client = mlflow.tracking.MlflowClient(tracking_uri=mlflow_uri)
    tags = {k: v for k, v in first.data.tags.items() if k.startswith("spectune.")}
    late = client.create_run(first.info.experiment_id, tags=tags, run_name="job again")
    orphan_tags = {"spectune.job": tags["spectune.job"], "spectune.trial": "1"}
    orphan_tags["mlflow.parentRunId"] = late.info.run_id
    client.create_run(first.info.experiment_id, tags=orphan_tags, run_name="trial 1")

    log_trial(Store(db_url), job_id, space, _record(2))  # another worker, another Store
    parents, trials = _runs(mlflow_uri)
    assert [p.info.run_id for p in parents] == [first.info.run_id]
    assert sorted(r.data.tags["spectune.trial"] for r in trials) == ["0", "1", "2"]
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {first.info.run_id}
    assert client.get_run(late.info.run_id).info.lifecycle_stage == "deleted"


@pytest.mark.parametrize(
    ("state", "status"), [("cancelled", "KILLED"), ("failed", "FAILED"), ("succeeded", "FINISHED")]
)
def test_the_parent_ends_with_the_job(space_dir, db_url, mlflow_uri, state, status):
    store = Store(db_url)
    space = _space(space_dir, trials=2, confirm=0)
    job_id = create_job(store, space)
    log_trial(store, job_id, space, _record(0))
    (parent,), _ = _runs(mlflow_uri)
    assert parent.info.status == "RUNNING"
    on_job_stopped(store, job_id, state)  # as tuner/job.py does after store.end_job(...)
    (parent,), (trial,) = _runs(mlflow_uri)
    assert parent.info.status == status and parent.info.end_time is not None
    assert parent.data.tags["spectune.job_state"] == state
    assert trial.info.status == "FINISHED"  # the trial's own run keeps its state


def test_a_resumed_job_runs_its_parent_again(space_dir, db_url, mlflow_uri):
    """Cancelled, then resumed (``spectune resume``): the next trial reopens the same parent,
    which ends with the job's final state."""
    store = Store(db_url)
    space = _space(space_dir, trials=3, confirm=0)
    job_id = create_job(store, space)
    log_trial(store, job_id, space, _record(0))
    on_job_stopped(store, job_id, "cancelled")
    (parent,), _ = _runs(mlflow_uri)
    assert parent.info.status == "KILLED"
    log_trial(Store(db_url), job_id, space, _record(1))  # the resumed run's first trial
    (again,), trials = _runs(mlflow_uri)
    assert again.info.run_id == parent.info.run_id
    assert again.info.status == "RUNNING" and again.data.tags["spectune.job_state"] == "running"
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent.info.run_id}
    on_job_stopped(store, job_id, "succeeded")
    (done,), _ = _runs(mlflow_uri)
    assert done.info.status == "FINISHED" and done.data.tags["spectune.job_state"] == "succeeded"


def test_a_job_stopped_before_any_trial_leaves_no_run(space_dir, db_url, mlflow_uri):
    store = Store(db_url)
    job_id = create_job(store, _space(space_dir, trials=1, confirm=0))
    on_job_stopped(store, job_id, "failed")
    assert _runs(mlflow_uri) == ([], [])


def test_stopping_never_raises(space_dir, db_url, monkeypatch, caplog):
    """It runs while the job's own exception is raised: it must not replace it."""
    monkeypatch.setenv(ENV_TRACKING_URI, (space_dir / "mlruns").as_uri())
    job_id = create_job(Store(db_url), _space(space_dir, trials=1, confirm=0))
    monkeypatch.setitem(sys.modules, "mlflow", None)  # the extra is not installed
    on_job_stopped(Store(db_url), job_id, "failed")
    monkeypatch.setenv(ENV_TRACKING_URI, "nosuchscheme://nowhere")
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    with caplog.at_level(logging.WARNING, logger="tuner.integrations._mlflow"):
        on_job_stopped(Store(db_url), job_id, "cancelled")
    assert "MLflow: end of job 1 (cancelled) not logged" in caplog.text
    monkeypatch.delenv(ENV_TRACKING_URI)
    on_job_stopped(Store(db_url), job_id, "cancelled")  # MLflow off: nothing to do
