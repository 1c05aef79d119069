"""``GET /api/jobs/{id}/predictions`` and the search fields of a trial, on a guided job that
replays the FAKE chain-model surface (tests/search/chain_surface.py): no number here was
measured by anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.helpers import make_settings
from tests.search.chain_surface import write_chain_surface
from tuner.api import create_app
from tuner.context import JobContext
from tuner.job import create_job, run_job
from tuner.search import SearchStrategy
from tuner.space import parse_space
from tuner.storage import Store
from tuner.surface import read_surface


def guided_replay_job(root: Path, url: str, trials: int = 12, simulated: bool = False) -> int:
    """A finished guided job replaying the chain surface (``simulated``: its header says a
    simulator wrote it). It spends all its trials (``stop_early: false``), so its table holds
    every kind of proposal: the other classes' launches come after nothing left can win."""
    surface = write_chain_surface(root / "chain.jsonl")
    if simulated:
        lines = surface.read_text().splitlines()
        lines[0] = json.dumps({**json.loads(lines[0]), "simulated": True})
        surface.write_text("\n".join(lines) + "\n")
    data = read_surface(surface).space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(surface)}
    data.update(trials=trials, stop_early=False)
    store = Store(url)
    store.ensure_schema()
    jid = create_job(store, parse_space(data, base_dir=root))
    run_job(store, jid, work_dir=root / "work")
    return jid


@pytest.fixture(scope="module")
def guided(tmp_path_factory):
    root = tmp_path_factory.mktemp("guided")
    settings = make_settings(root)
    jid = guided_replay_job(root, settings.database_url)
    with TestClient(create_app(settings, run_worker=False)) as c:
        yield c, Store(settings.database_url), jid


def test_predictions_are_the_strategys_and_say_they_are_predicted(guided):
    client, store, jid = guided
    r = client.get(f"/api/jobs/{jid}/predictions")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job_id"] == jid and body["kind"] == "predicted"
    assert body["note"] == "predictions of the depth model, never measurements"
    want = SearchStrategy(JobContext.reading(store, jid)).predictions()
    space = store.space(jid)
    assert body["points"] and len(body["points"]) == len(want)
    for got, w in zip(body["points"], want, strict=True):
        assert got["params"] == w.params
        assert (got["workload"], got["concurrency"]) == (w.workload, w.concurrency)
        assert (w.workload, w.concurrency) == (space.primary_workload, space.primary_concurrency)
        assert got["metrics"] == pytest.approx(w.metrics)
        assert got["output_tok_per_s"] == pytest.approx(w.metrics["output_tok_per_s"])
        assert got["p99_tpot_ms"] == pytest.approx(w.metrics["p99_tpot_ms"])
        assert got["rel_sigma"] == pytest.approx(w.rel_sigma)
        assert got["basis"] == list(w.basis) and got["notes"] == list(w.notes)
        assert got["level"] == f"{w.workload}@{w.concurrency}"  # kept for earlier clients
        assert got["method"] == w.params["method"]
    # one point per class: the batch sizes (and memory shares) a class launches as one are
    # one prediction, never a pile of markers on one spot
    keys = [repr(sorted(p["params"].items())) for p in body["points"]]
    assert len(keys) == len(set(keys))
    # never a configuration the job measured
    launched = {repr(sorted(t.params.items())) for t in store.trials(jid, launched_only=True)}
    assert not launched & {repr(sorted(p["params"].items())) for p in body["points"]}


def test_trials_show_how_the_search_proposed_them_and_the_prediction_error(guided):
    client, store, jid = guided
    items = client.get(f"/api/jobs/{jid}/trials", params={"limit": 1000}).json()["items"]
    records = {r.number: r for r in store.trial_records(jid)}
    by = [t["search"]["by"] if t["search"] else None for t in items]
    assert by[0] == "start" and "guide: scan" in by and "guide: depth" in by
    with_pred = [t for t in items if t["prediction_error_pct"] is not None]
    assert with_pred, by
    for t in items:
        assert {"worker_id", "devices", "search", "prediction_error_pct"} <= t.keys()
        assert t["prediction_error_pct"] == records[t["number"]].prediction_error_pct
    t = with_pred[0]
    pred = t["search"]["predicted"]
    measured = t["metrics"][pred["objective"]]
    assert t["prediction_error_pct"] == pytest.approx(
        100 * (measured - pred["value"]) / pred["value"]
    )
    # the point it was made for, typed; ``level`` still served, derived from them
    space = store.space(jid)
    assert (pred["workload"], pred["concurrency"]) == (
        space.primary_workload,
        space.primary_concurrency,
    )
    assert pred["level"] == f"{pred['workload']}@{pred['concurrency']}"
    stored = store.trial(jid, t["number"]).search["predicted"]
    assert "level" not in stored and stored["workload"] == pred["workload"]
    detail = client.get(f"/api/jobs/{jid}/trials/{t['number']}").json()
    assert detail["search"] == t["search"]
    assert detail["prediction_error_pct"] == t["prediction_error_pct"]


def test_unknown_job_is_a_404_problem(guided):
    client, _, _ = guided
    r = client.get("/api/jobs/424242/predictions")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["status"] == 404


def test_a_sampler_job_has_no_predictions(tmp_path):
    settings = make_settings(tmp_path)
    surface = write_chain_surface(tmp_path / "chain.jsonl")
    data = read_surface(surface).space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(surface)}
    data.update(trials=3, search="sampler")
    store = Store(settings.database_url)
    store.ensure_schema()
    jid = create_job(store, parse_space(data, base_dir=tmp_path))
    run_job(store, jid, work_dir=tmp_path / "work")
    with TestClient(create_app(settings, run_worker=False)) as c:
        body = c.get(f"/api/jobs/{jid}/predictions").json()
    assert body == {
        "job_id": jid,
        "kind": "predicted",
        "note": "predictions of the depth model, never measurements",
        "points": [],
    }


def test_the_route_is_documented(guided):
    client, _, _ = guided
    op = client.get("/openapi.json").json()["paths"]["/api/jobs/{job_id}/predictions"]["get"]
    assert op["operationId"] == "get_predictions"
    assert {"200", "404", "401", "422"} <= op["responses"].keys()
    assert "application/problem+json" in op["responses"]["404"]["content"]
