"""optuna-dashboard reads a SpecTune study as SpecTune means it: checked through the
dashboard's own WSGI app (its JSON API is what its pages draw)."""

from __future__ import annotations

import json

import optuna
import optuna_dashboard
import pytest

from tests.fake_space import _space
from tests.integrations.conftest import FinishedJob, wsgi_call, wsgi_get
from tuner.integrations import label_study, metric_names
from tuner.integrations._dashboard import write_dashboard_attrs
from tuner.job import create_job
from tuner.measure import constraint_values
from tuner.pareto import job_report
from tuner.storage import Store, study_name_for

NAMES = ["output_tok_per_s score", "p99_tpot_ms score"]


def _study_detail(db_url: str, job_id: int) -> dict:
    app = optuna_dashboard.wsgi(db_url)
    studies = wsgi_get(app, "/api/studies")["study_summaries"]
    sid = next(s["study_id"] for s in studies if s["study_name"] == study_name_for(job_id))
    return wsgi_get(app, f"/api/studies/{sid}")


def _attrs(t: dict) -> dict[str, str]:
    return {a["key"]: a["value"] for a in t["user_attrs"]}


def _point(tok_s: float, p99_tpot: float) -> dict:
    stats = {"output_tok_per_s": {"median": tok_s, "mad": 1.0, "ci95_low": tok_s - 2}}
    stats["output_tok_per_s"]["ci95_high"] = tok_s + 2
    return {
        "workload": "code_completion",
        "concurrency": 2,
        "output_tok_per_s": tok_s,
        "p99_tpot_ms": p99_tpot,
        "acceptance_rate": 0.5,
        "mean_acceptance_length": 2.0,
        "num_failed": 0,
        "num_requests": 4,
        "stats": stats,
        "score": {"output_tok_per_s": tok_s - 3, "p99_tpot_ms": p99_tpot + 1},
    }


def test_slo_violation_shows_infeasible_in_the_dashboard(space_dir, db_url):
    """The bug: Optuna 5 keeps constraints under ``constraints:<name>``, the dashboard reads
    ``constraints``; without the copy both trials below would look feasible there."""
    space = _space(space_dir, slo=20)
    job_id = create_job(Store(db_url), space)
    study = Store(db_url).load_study(job_id)
    for point, extra in [(_point(100.0, 30.0), {}), (_point(90.0, 10.0), {"reused_from": 0})]:
        trial = study.ask()
        for k, v in constraint_values(point, space.slo.limits()).items():
            trial.set_constraint(k, v)
        write_dashboard_attrs(trial, [point], extra, space)
        study.tell(trial, [point["score"]["output_tok_per_s"], point["score"]["p99_tpot_ms"]])

    detail = _study_detail(db_url, job_id)
    assert detail["objective_names"] == NAMES
    slow, fast = detail["trials"]
    # the dashboard's rule (its bundle.js): feasible when every constraint is <= 0
    assert not all(c <= 0 for c in slow["constraints"])
    assert all(c <= 0 for c in fast["constraints"]) and fast["constraints"]
    assert _attrs(slow)["feasible"] == "False" and _attrs(fast)["feasible"] == "True"
    assert "p99_tpot_ms 30.00 > 20" in _attrs(slow)["violations"]
    # the medians, not the scores Optuna optimises, under their own names
    assert slow["values"] == [97.0, 31.0]
    assert _attrs(slow)["output_tok_per_s"] == "100.0"
    assert _attrs(slow)["output_tok_per_s_ci95"] == "[98.0, 102.0]"
    assert _attrs(slow)["mean_acceptance_length"] == "2.0"
    assert "reuses_trial" not in _attrs(slow) and _attrs(fast)["reuses_trial"] == "0"
    # SpecTune's own view keeps only the named constraints
    records = Store(db_url).trial_records(job_id)
    assert set(records[0].constraints) == {"p99_tpot_ms", "failed_requests", "noisy"}


def test_label_study_names_an_existing_study_once(space_dir, db_url):
    """A study made before this release gets its names when its job resumes."""
    space = _space(space_dir)
    study = optuna.create_study(storage=db_url, directions=["maximize", "minimize"])
    assert study.metric_names is None
    label_study(study, space)
    label_study(study, space)
    assert optuna.load_study(study_name=study.study_name, storage=db_url).metric_names == NAMES
    assert metric_names(space) == NAMES


def test_a_finished_job_reads_right_in_the_dashboard(finished_job: FinishedJob):
    detail = _study_detail(finished_job.db_url, finished_job.job_id)
    assert detail["objective_names"] == NAMES
    rep = job_report(Store(finished_job.db_url), finished_job.job_id)
    feasible_in_report = {p.trial_number: p.feasible for p in rep.points}
    records = {r.number: r for r in Store(finished_job.db_url).trial_records(finished_job.job_id)}
    done = [t for t in detail["trials"] if t["state"] == "Complete"]
    study_attrs = {a["key"]: a["value"] for a in detail["user_attrs"]}
    assert study_attrs.pop("spectune") == "fake-job"
    study_attrs = {k: json.loads(v) for k, v in study_attrs.items()}
    assert study_attrs["winner_trial"] == (rep.winner.trial_number if rep.winner else None)
    assert study_attrs["confirmed"], "the job confirmed its best point and the baseline"
    assert len(done) >= 7
    reused = 0
    for t in done:
        attrs, rec = _attrs(t), records[t["number"]]
        assert attrs["concurrency"] == "2" and attrs["workload"] == "code_completion"
        assert t["constraints"], f"trial {t['number']} has no constraints for the dashboard"
        dash_ok = all(c <= 0 for c in t["constraints"])
        assert attrs["feasible"] == str(dash_ok)
        if rec.metrics.get("confirmed"):  # re-measured after the trial ended: on the study
            summary = study_attrs["confirmed"][str(t["number"])]
            assert summary["feasible"] == feasible_in_report[t["number"]]
            assert summary["output_tok_per_s"] == rec.metrics["output_tok_per_s"]
        elif t["number"] in feasible_in_report:  # launched (a reuse is not a new point)
            assert dash_ok == feasible_in_report[t["number"]]
        if rec.reused_from is not None:
            reused += 1
            assert attrs["reuses_trial"] == str(rec.reused_from)
        search = rec.metrics.get("search") or rec.metrics  # confirmed ones keep the search's
        assert float(attrs["output_tok_per_s"]) == pytest.approx(search["output_tok_per_s"])
        assert float(attrs["p99_tpot_ms"]) == pytest.approx(search["p99_tpot_ms"])
    assert reused >= 1  # 8 trials, 7 distinct configurations


def test_the_dashboard_on_a_read_only_url_reads_and_cannot_write(finished_job: FinishedJob):
    """The documented way to run it beside SpecTune (docs/integrations.md): SQLite opened
    with ``mode=ro``."""
    path = finished_job.db_url.removeprefix("sqlite:///")
    ro = f"sqlite:///file:{path}?mode=ro&uri=true"
    detail = _study_detail(ro, finished_job.job_id)
    assert detail["objective_names"] == NAMES and len(detail["trials"]) == 8
    app = optuna_dashboard.wsgi(ro)
    sid = wsgi_get(app, "/api/studies")["study_summaries"][0]["study_id"]
    assert wsgi_call(app, f"/api/studies/{sid}", "DELETE")[0].startswith("500")
    assert len(Store(finished_job.db_url).load_study(finished_job.job_id).trials) == 8
