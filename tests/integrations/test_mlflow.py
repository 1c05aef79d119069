"""Each trial as an MLflow run, the winner's exports as artifacts (a local file store)."""

from __future__ import annotations

import json
import logging
import sys

import mlflow
import pytest

from tests.fake_space import SPACE, _space
from tests.helpers import fake_measurers
from tests.integrations.conftest import FAKE_SERVER, FinishedJob
from tuner.export import export_job, winner_exports
from tuner.integrations import ENV_EXPERIMENT, ENV_TRACKING_URI, MlflowUnavailable
from tuner.integrations._mlflow import log_trial
from tuner.job import create_job, run_job
from tuner.pareto import job_report
from tuner.space import loads_space
from tuner.storage import Store


def test_each_trial_is_a_run_and_the_winner_exports_are_artifacts(
    finished_job: FinishedJob, tmp_path
):
    store = Store(finished_job.db_url)
    client = mlflow.tracking.MlflowClient(tracking_uri=finished_job.mlflow_uri)
    exp = client.get_experiment_by_name(finished_job.experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags["spectune.trial"] == "job"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    rep = job_report(store, finished_job.job_id)
    assert rep.winner is not None
    assert parent.data.tags["spectune.winner_trial"] == str(rep.winner.trial_number)
    available = [f for f, why in winner_exports(rep).items() if why is None]
    assert "vllm-json" in available
    for fmt in available:
        name = next(
            a.path
            for a in client.list_artifacts(parent.info.run_id, "exports")
            if a.path.startswith(f"exports/{fmt}.")
        )
        local = client.download_artifacts(parent.info.run_id, name, str(tmp_path))
        with open(local, encoding="utf-8") as f:
            assert f.read() == export_job(store, finished_job.job_id, fmt)

    children = {int(r.data.tags["spectune.trial"]): r for r in runs if r is not parent}
    records = store.trial_records(finished_job.job_id)
    assert sorted(children) == [r.number for r in records] and len(records) == 8
    reused = 0
    for rec in records:
        run = children[rec.number]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["spectune.state"] == rec.state
        assert json.loads(run.data.params["method"]) == rec.method
        m = run.data.metrics
        search = rec.metrics.get("search") or rec.metrics
        assert m["output_tok_per_s"] == pytest.approx(search["output_tok_per_s"])
        assert "code_completion/c1/p99_tpot_ms" in m and "p99_tpot_ms_ci95_high" in m
        if rec.metrics.get("confirmed"):
            assert m["confirmed_output_tok_per_s"] == pytest.approx(
                rec.metrics["output_tok_per_s"]
            )
        if rec.reused_from is not None:
            reused += 1
            assert run.data.tags["spectune.reuses_trial"] == str(rec.reused_from)
    assert reused >= 1


def test_asked_for_mlflow_without_it_the_job_fails_naming_the_setting(
    space_dir, db_url, fake_launcher, monkeypatch
):
    monkeypatch.setenv(ENV_TRACKING_URI, (space_dir / "mlruns").as_uri())
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if the extra were not installed
    job_id = create_job(Store(db_url), _space(space_dir, trials=1, confirm=0))
    with pytest.raises(MlflowUnavailable, match=ENV_TRACKING_URI):
        run_job(
            Store(db_url),
            job_id,
            work_dir=space_dir / "w",
            measurers=fake_measurers(fake_launcher),
        )
    job = Store(db_url).job(job_id)
    assert job.state == "failed" and "spectune[mlflow]" in (job.error or "")
    assert Store(db_url).trial_records(job_id)[0].state == "waiting"  # nothing launched


def test_a_failing_tracking_server_is_logged_not_fatal(space_dir, db_url, monkeypatch, caplog):
    monkeypatch.setenv(ENV_TRACKING_URI, "nosuchscheme://nowhere")
    space = _space(space_dir)
    job_id = create_job(Store(db_url), space)
    record = dict(number=0, state="complete", method="none", params={"method": "none"})
    record.update(measurements=[], extra={})
    with caplog.at_level(logging.WARNING, logger="tuner.integrations._mlflow"):
        log_trial(Store(db_url), job_id, space, record)
    assert "MLflow: trial 0 of job 1 not logged" in caplog.text


def test_a_failed_trial_gets_a_failed_run_when_the_job_ends(space_dir, db_url, monkeypatch):
    uri = (space_dir / "mlruns").as_uri()
    monkeypatch.setenv(ENV_TRACKING_URI, uri)
    monkeypatch.setenv(ENV_EXPERIMENT, "failed-runs")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    text = SPACE.format(drafts="bad_vocab", slo=1000, trials=2, confirm=0, search="guided")
    text += "start_with: [{method: draft_model, num_speculative_tokens: 2, draft: bad_vocab}]\n"
    job_id = create_job(Store(db_url), loads_space(text, base_dir=space_dir))
    launcher = [sys.executable, str(FAKE_SERVER)]
    run_job(Store(db_url), job_id, work_dir=space_dir / "w", measurers=fake_measurers(launcher))
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("failed-runs")
    runs = {r.data.tags["spectune.trial"]: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {"job", "0", "1"}
    assert runs["1"].info.status == "FAILED"
    assert runs["1"].data.tags["spectune.fail_reason"] == "invalid_config"
    assert runs["0"].info.status == "FINISHED" and "output_tok_per_s" in runs["0"].data.metrics
