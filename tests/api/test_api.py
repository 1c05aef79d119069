"""The REST API through FastAPI's test client.

Jobs with trials come from the FAKE OpenAI server (tests/fake_openai_server.py) run by a
worker built with test-only ``measurers``; the real-engine path is
tests/engines/test_engine_vllm.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tests.helpers import (
    FAKE_LAUNCHER,
    FAKE_PRESET,
    FAKE_PRESET_CONFIRM,
    fake_measurers,
    make_preset_dir,
    make_settings,
)
from tuner.api import ServiceSettings, create_app, hash_token
from tuner.client import ApiError, SpecTuneClient
from tuner.engines import EXPORT_FORMATS
from tuner.storage import Store
from tuner.worker import Worker


def job_count(url: str) -> int:
    return Store(url).list_jobs(limit=1)[1]


@pytest.fixture
def settings(tmp_path: Path) -> ServiceSettings:
    return make_settings(tmp_path)


@pytest.fixture
def client(settings: ServiceSettings):
    with TestClient(create_app(settings, run_worker=False)) as c:
        yield c


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """One finished 4-trial job (FAKE engine), shared by the read-only tests below."""
    root = tmp_path_factory.mktemp("done")
    s = make_settings(root)
    with TestClient(create_app(s, run_worker=False)) as c:
        job = c.post("/api/jobs", json={"preset": "fake-small"}).json()
        worker = Worker(
            Store(s.database_url), work_dir=s.work_dir, measurers=fake_measurers(FAKE_LAUNCHER)
        )
        assert worker.run_once() == job["id"]
        assert c.get(f"/api/jobs/{job['id']}").json()["state"] == "succeeded"
        yield c, job["id"], s


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory):
    """One finished 4-trial job with the end-of-job confirmation (FAKE engine)."""
    root = tmp_path_factory.mktemp("confirmed")
    make_preset_dir(root, FAKE_PRESET_CONFIRM)
    s = make_settings(root)
    with TestClient(create_app(s, run_worker=False)) as c:
        job = c.post("/api/jobs", json={"preset": "fake-small"}).json()
        worker = Worker(
            Store(s.database_url), work_dir=s.work_dir, measurers=fake_measurers(FAKE_LAUNCHER)
        )
        assert worker.run_once() == job["id"]
        assert c.get(f"/api/jobs/{job['id']}").json()["state"] == "succeeded"
        yield c, job["id"], s


# --------------------------------------------------------------------------- service basics


def test_openapi_health_and_presets(client):
    paths = client.get("/openapi.json").json()["paths"]
    for p in (
        "/api/jobs",
        "/api/jobs/{job_id}",
        "/api/jobs/{job_id}/cancel",
        "/api/jobs/{job_id}/trials",
        "/api/jobs/{job_id}/pareto",
        "/api/jobs/{job_id}/export",
        "/api/export-formats",
        "/api/search-spaces",
        "/healthz",
        "/readyz",
    ):
        assert p in paths, p
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    presets = client.get("/api/search-spaces").json()
    assert [p["name"] for p in presets] == ["fake-small"]
    assert presets[0]["error"] is None and presets[0]["trials"] == 4


def test_real_presets_are_listed_and_valid(tmp_path):
    s = ServiceSettings(database_url=f"sqlite:///{tmp_path / 'x.db'}")
    with TestClient(create_app(s, run_worker=False)) as c:
        presets = {p["name"]: p for p in c.get("/api/search-spaces").json()}
    assert "tiny-cpu" in presets and presets["tiny-cpu"]["error"] is None


def test_submit_from_each_source(client, settings):
    yaml_text = (settings.search_spaces_dir / "fake-small.yaml").read_text()
    r = client.post("/api/jobs", json={"preset": "fake-small"})
    assert r.status_code == 201 and r.json()["state"] == "queued"
    assert r.headers["location"] == f"/api/jobs/{r.json()['id']}"
    r = client.post(
        "/api/jobs",
        json={"search_space_yaml": yaml_text, "trials": 2, "slo": {"p99_ttft_ms": 500}},
    )
    assert r.status_code == 201
    job = r.json()
    assert job["n_trials"] == 2
    # the request's SLO adds to the preset's, it does not drop its other limits
    assert job["slo"] == {"p99_tpot_ms": 1000.0, "p99_ttft_ms": 500.0}
    r = client.post("/api/jobs", json={"search_space": yaml.safe_load(yaml_text)})
    assert r.status_code == 201
    listed = client.get("/api/jobs").json()
    assert listed["total"] == 3 and [j["id"] for j in listed["items"]] == [3, 2, 1]
    assert client.get("/api/jobs", params={"state": "running"}).json()["total"] == 0


BAD = [
    ({"search_space_yaml": "name: [unclosed"}, ["body", "search_space_yaml"], "not valid YAML"),
    (
        {"search_space_yaml": FAKE_PRESET + "bogus_field: 1\n"},
        ["body", "search_space_yaml", "bogus_field"],
        "Extra inputs",
    ),
    (
        {"search_space_yaml": FAKE_PRESET.replace("min: 1, max: 3}}\n", "min: 3, max: 1}}\n")},
        ["body", "search_space_yaml", "methods", "ngram", "num_speculative_tokens"],
        "below min",
    ),
    ({"preset": "fake-small", "slo": {"p99_tpot_ms": -5}}, ["body", "slo", "p99_tpot_ms"], ""),
    ({"preset": "fake-small", "slo": {"p99_tpot_ms": 1e12}}, ["body", "slo", "p99_tpot_ms"], ""),
    ({"preset": "fake-small", "slo": {"p42_ms": 5}}, ["body", "slo", "p42_ms"], ""),
    ({"preset": "fake-small", "trials": 0}, ["body", "trials"], ""),
    ({"preset": "no-such"}, ["body", "preset"], "unknown preset 'no-such'"),
    ({"preset": "../search_spaces/fake-small"}, ["body", "preset"], ""),
    ({"preset": "fake-small", "colour": "red"}, ["body", "colour"], ""),
    ({}, ["body"], "exactly one of"),
    ({"preset": "fake-small", "search_space_yaml": "name: x"}, ["body"], "exactly one of"),
    ({"search_space_yaml": "- a list"}, ["body", "search_space_yaml"], "mapping"),
]


@pytest.mark.parametrize(("body", "loc", "msg"), BAD)
def test_bad_submission_is_422_naming_the_field_and_stores_nothing(
    client, settings, body, loc, msg
):
    r = client.post("/api/jobs", json=body)
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert any(e["loc"] == loc and msg in e["msg"] for e in errors), errors
    assert job_count(settings.database_url) == 0
    assert optuna.study.get_all_study_names(settings.database_url) == []
    # the dry-run validator answers the same
    if body:
        r = client.post("/api/search-spaces/validate", json=body)
        assert r.status_code == 422


def test_validate_stores_nothing(client, settings):
    r = client.post("/api/search-spaces/validate", json={"preset": "fake-small", "trials": 2})
    assert r.status_code == 200
    assert r.json()["n_trials"] == 2 and r.json()["methods"] == ["ngram", "draft_model"]
    assert job_count(settings.database_url) == 0


def test_idempotency_key(client, settings):
    body = {"preset": "fake-small", "idempotency_key": "nightly-1"}
    first = client.post("/api/jobs", json=body)
    again = client.post("/api/jobs", json=body)
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other = client.post("/api/jobs", json={**body, "trials": 2})
    assert other.status_code == 409 and "idempotency_key" in other.json()["detail"]
    assert job_count(settings.database_url) == 1
    assert client.post("/api/jobs", json={**body, "idempotency_key": "n2"}).status_code == 201


def test_oversized_body_is_413_with_or_without_content_length(client, settings):
    huge = {"search_space_yaml": "# " + "x" * (settings.max_body_bytes + 10)}
    r = client.post("/api/jobs", json=huge)
    assert r.status_code == 413
    payload = json.dumps(huge).encode()

    def chunks():
        for i in range(0, len(payload), 4096):
            yield payload[i : i + 4096]

    r = client.post("/api/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert job_count(settings.database_url) == 0
    # a body just under the limit still reaches validation
    assert client.post("/api/jobs", json={"preset": "fake-small"}).status_code == 201


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/jobs/999"),
        ("POST", "/api/jobs/999/cancel"),
        ("GET", "/api/jobs/999/trials"),
        ("GET", "/api/jobs/999/trials/0"),
        ("GET", "/api/jobs/999/pareto"),
        ("GET", "/api/jobs/999/export"),
    ],
)
def test_unknown_job_is_404(client, method, path):
    r = client.request(method, path)
    assert r.status_code == 404 and "job 999" in r.json()["detail"]


def test_bad_job_id_is_422(client):
    assert client.get("/api/jobs/0").status_code == 422
    assert client.get("/api/jobs/abc").status_code == 422


def test_cancel_a_queued_job_then_409(client):
    job = client.post("/api/jobs", json={"preset": "fake-small"}).json()
    r = client.post(f"/api/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    r = client.post(f"/api/jobs/{job['id']}/cancel")
    assert r.status_code == 409 and "already ended (cancelled)" in r.json()["detail"]


# --------------------------------------------------------------------------- auth & settings


def test_auth_on_needs_a_token_for_job_data(tmp_path):
    s = make_settings(tmp_path, api_token_sha256=(hash_token("s3cret"), hash_token("other")))
    with TestClient(create_app(s, run_worker=False)) as c:
        for method, path in [
            ("GET", "/api/jobs"),
            ("POST", "/api/jobs"),
            ("GET", "/api/jobs/1"),
            ("POST", "/api/jobs/1/cancel"),
            ("GET", "/api/jobs/1/trials"),
            ("GET", "/api/jobs/1/pareto"),
            ("GET", "/api/jobs/1/export"),
            ("GET", "/api/export-formats"),
            ("POST", "/api/search-spaces/validate"),
        ]:
            r = c.request(method, path, json={"preset": "fake-small"})
            assert r.status_code == 401, (method, path)
            assert r.headers["www-authenticate"] == "Bearer"
            bad = c.request(method, path, headers={"Authorization": "Bearer nope"})
            assert bad.status_code == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert c.post("/api/jobs", json={"preset": "fake-small"}, headers=ok).status_code == 201
        assert c.get("/api/jobs", headers=ok).json()["total"] == 1
        other = {"Authorization": "Bearer other"}
        assert c.get("/api/jobs/1", headers=other).status_code == 200
        # no job data: open
        assert c.get("/healthz").status_code == 200
        assert c.get("/api/search-spaces").status_code == 200
        assert c.get("/openapi.json").status_code == 200


def test_settings_refuse_unsafe_defaults(tmp_path):
    with pytest.raises(ValidationError, match="refusing to serve 0.0.0.0 without auth"):
        ServiceSettings(host="0.0.0.0")
    with pytest.raises(ValidationError, match="SHA-256 hex digest"):
        ServiceSettings(api_token_sha256=("my-plain-token",))
    assert ServiceSettings(host="0.0.0.0", allow_unauthenticated_remote=True).host == "0.0.0.0"
    assert ServiceSettings(host="0.0.0.0", api_token_sha256=(hash_token("t"),)).auth_enabled
    assert not ServiceSettings().auth_enabled and ServiceSettings().host == "127.0.0.1"


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("SPECTUNE_API_TOKEN_SHA256", f"{hash_token('a')}, {hash_token('b')}")
    monkeypatch.setenv("SPECTUNE_HOST", "0.0.0.0")
    s = ServiceSettings()
    assert s.api_token_sha256 == (hash_token("a"), hash_token("b"))
    monkeypatch.setenv("SPECTUNE_API_TOKEN_SHA256", "")
    with pytest.raises(ValidationError):
        ServiceSettings()


# --------------------------------------------------------------------------- results of a job


def test_job_progress_after_the_run(done):
    c, job_id, _ = done
    job = c.get(f"/api/jobs/{job_id}").json()
    assert job["trials_done"] == 4 and job["n_trials"] == 4
    assert job["current_trial"] is None and job["eta_s"] is None
    assert job["finished_at"] and job["engine_launches"] >= 1


def test_trials_are_paged(done):
    c, job_id, _ = done
    page = c.get(f"/api/jobs/{job_id}/trials", params={"offset": 1, "limit": 2}).json()
    assert page["total"] == 4 and [t["number"] for t in page["items"]] == [1, 2]
    t0 = c.get(f"/api/jobs/{job_id}/trials", params={"limit": 1}).json()["items"][0]
    assert t0["method"] == "none" and t0["state"] == "complete"
    assert isinstance(t0["metrics"]["p99_tpot_ms"], float)
    assert {m["concurrency"] for m in t0["measurements"]} == {1, 2}
    detail = c.get(f"/api/jobs/{job_id}/trials/0").json()
    assert detail["log_tail"]  # the fake engine's log lives under the work folder
    assert c.get(f"/api/jobs/{job_id}/trials/99").status_code == 404
    assert c.get(f"/api/jobs/{job_id}/trials", params={"limit": 0}).status_code == 422


def test_pareto_re_evaluates_any_slo(done):
    c, job_id, _ = done
    rep = c.get(f"/api/jobs/{job_id}/pareto").json()
    assert rep["concurrency"] == 2 and rep["levels"] == [1, 2]
    assert rep["slo"] == {"p99_tpot_ms": 1000.0}
    pts = rep["points"]
    assert {p["concurrency"] for p in pts} == {1, 2}
    assert rep["baseline_trial"] == 0 and rep["winner_trial"] is not None
    assert all(p["feasible"] for p in pts)
    assert sum(p["is_winner"] for p in pts) == 1
    tpots = sorted(p["p99_tpot_ms"] for p in pts if p["concurrency"] == 2)
    tight = c.get(f"/api/jobs/{job_id}/pareto", params={"slo_p99_tpot_ms": 1e-6}).json()
    assert not any(p["feasible"] for p in tight["points"]) and tight["winner_trial"] is None
    assert all("p99_tpot_ms" in p["violations"][0] for p in tight["points"])
    # between the fastest and the slowest point: some feasible, some not
    assert tpots[0] < tpots[-1]  # speculation shortens the fake engine's TPOT
    mid = (tpots[0] + tpots[-1]) / 2
    half = c.get(f"/api/jobs/{job_id}/pareto", params={"slo_p99_tpot_ms": mid}).json()
    feas = [p["feasible"] for p in half["points"] if p["concurrency"] == 2]
    assert any(feas) and not all(feas)
    at1 = c.get(f"/api/jobs/{job_id}/pareto", params={"concurrency": 1}).json()
    assert at1["concurrency"] == 1 and any(
        p["is_winner"] and p["concurrency"] == 1 for p in at1["points"]
    )


def test_pareto_points_carry_intervals_memory_and_greedy_match(done):
    c, job_id, _ = done
    rep = c.get(f"/api/jobs/{job_id}/pareto").json()
    assert rep["winner_confirmed"] is False and rep["launch_spread"] == []
    assert any("The winner is unconfirmed" in line for line in rep["why"])
    assert any("Nothing was launched twice" in line for line in rep["why"])
    trials = {t["number"]: t for t in c.get(f"/api/jobs/{job_id}/trials").json()["items"]}
    for p in rep["points"]:
        assert p["repeats"] == 2  # the preset's measurement.repeats
        for name in ("output_tok_per_s", "p99_tpot_ms"):
            lo, hi = p[f"{name}_ci95_low"], p[f"{name}_ci95_high"]
            assert lo <= hi and lo <= p[name] <= hi, (name, p)  # n=2: the median is the mean
        assert p["confirmed"] is False and p["search_output_tok_per_s"] is None  # confirm_top 0
        # nothing launched twice: the interval says it covers one launch's repeats only
        assert p["interval_kind"] == "within one launch" and p["launches"] == 1
        assert p["noisy"] is False  # max_relative_mad 10: never noisy here
        assert p["peak_rss_mb"] > 0 and p["kv_cache_tokens"] is None  # the fake logs no KV size
        t = trials[p["trial_number"]]
        assert p["peak_rss_mb"] == t["peak_rss_mb"]
        if p["is_baseline"]:
            assert p["lossless_match_rate"] is None and t["lossless_match_rate"] is None
        else:  # the fake's greedy ids equal the baseline's unless --fake-lossy
            assert p["lossless_match_rate"] == 1.0 == t["lossless_match_rate"]
    # trial-level numbers are top-level fields of a trial, not per-concurrency metrics
    assert "peak_rss_mb" not in trials[0]["metrics"]
    # the per-request distributions and the spread are stored with every measurement
    m = trials[1]["measurements"][0]
    assert 0 < len(m["ttft_ms_values"]) == len(m["e2e_ms_values"]) <= m["num_ok"]
    assert m["stats"]["output_tok_per_s"]["n"] == 2 and len(m["runs"]) == 2


def test_pareto_round_cost_verdicts(done):
    c, job_id, _ = done
    rep = c.get(f"/api/jobs/{job_id}/pareto").json()
    spec = sorted({p["trial_number"] for p in rep["points"] if not p["is_baseline"]})
    rc = rep["round_cost"]
    assert [r["trial_number"] for r in rc] == spec  # one row per speculative trial
    base = {
        p["concurrency"]: p for p in rep["points"] if p["trial_number"] == rep["baseline_trial"]
    }
    for r in rc:
        assert r["method"] in ("ngram", "draft_model") and r["params"]["method"] == r["method"]
        assert [v["concurrency"] for v in r["verdicts"]] == rep["levels"]
        for v in r["verdicts"]:
            # One verdict: the speedup's 95% interval above 1 pays, below 1 does not, else tied.
            speedup = v["baseline_ms_per_token"] / v["spec_ms_per_token"]
            assert v["speedup"] == pytest.approx(speedup)
            assert v["margin_pct"] == pytest.approx((speedup - 1) * 100)
            lo, hi = v["speedup_ci95_low"], v["speedup_ci95_high"]
            hi = float("inf") if hi is None else hi  # null: unbounded above
            assert lo <= speedup <= hi
            want = "pays" if lo > 1 else "does not pay" if hi < 1 else "tied"
            assert v["state"] == want and v["pays_off"] == (want == "pays")
            assert v["concurrency"] in base
        # the crossover is the first level from which it never pays again
        tail = [
            v for v in r["verdicts"] if v["concurrency"] >= (r["crossover_concurrency"] or 1e9)
        ]
        assert not any(v["pays_off"] for v in tail)
        if r["crossover_concurrency"] is None:
            assert r["verdicts"][-1]["pays_off"]
    # the verdicts do not depend on the SLO or on the level the front is chosen at
    other = c.get(
        f"/api/jobs/{job_id}/pareto", params={"slo_p99_tpot_ms": 1e-6, "concurrency": 1}
    ).json()
    assert other["round_cost"] == rc


def test_confirmed_points_carry_the_search_numbers(confirmed):
    c, job_id, _ = confirmed
    rep = c.get(f"/api/jobs/{job_id}/pareto").json()
    conf = {p["trial_number"] for p in rep["points"] if p["confirmed"]}
    # confirm_top 1: the baseline and the winner, each launched at least twice
    assert rep["baseline_trial"] in conf and rep["winner_trial"] in conf
    assert rep["winner_confirmed"] is True
    assert rep["launch_spread"] and all(r["df"] >= 2 for r in rep["launch_spread"])
    for p in rep["points"]:
        # every interval carries the job's between-launch spread, launched once or not
        assert p["interval_kind"] == "between launches"
        assert p["output_tok_per_s_ci95_low"] <= p["output_tok_per_s"]
        assert p["output_tok_per_s"] <= p["output_tok_per_s_ci95_high"]
        if p["confirmed"]:
            assert p["search_output_tok_per_s"] > 0 and p["launches"] >= 2
        else:
            assert p["search_output_tok_per_s"] is None and p["launches"] == 1
    assert all(isinstance(e, dict) and "method" in e for e in rep["equivalent_to_winner"])
    assert len(rep["equivalent_trials"]) == len(rep["equivalent_to_winner"])
    assert all(
        v["interval_kind"] == "between launches" for t in rep["round_cost"] for v in t["verdicts"]
    )
    t = c.get(f"/api/jobs/{job_id}/trials/{rep['baseline_trial']}").json()
    assert t["metrics"]["confirmed"] is True and "output_tok_per_s" in t["metrics"]["search"]
    typed = SpecTuneClient(http=c).pareto(job_id)
    assert sum(p.confirmed for p in typed.points) == len(conf) * len(rep["levels"])
    assert typed.round_cost and typed.round_cost[0].verdicts[0].spec_ms_per_token > 0


def test_a_job_with_several_workloads_reports_each(client):
    text = FAKE_PRESET.replace(
        "workload: {num_prompts: 4, max_tokens: 12, warmup_requests: 1}",
        "workloads: [{builtin: chat, num_prompts: 4}, {builtin: code_completion, num_prompts: 4}]",
    )
    job = client.post("/api/jobs", json={"search_space_yaml": text}).json()
    assert job["workload"] == "chat"  # the first one is the objectives'
    assert job["workloads"] == ["chat", "code_completion"]
    for wl in (None, "chat", "code_completion"):
        r = client.get(f"/api/jobs/{job['id']}/pareto", params={"workload": wl})
        assert r.status_code == 200 and r.json()["workload"] == (wl or "chat")
        assert r.json()["points"] == [] and r.json()["round_cost"] == []  # nothing run yet
    r = client.get(f"/api/jobs/{job['id']}/pareto", params={"workload": "summarization"})
    assert r.status_code == 422 and "'chat', 'code_completion'" in r.json()["errors"][0]["msg"]


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"slo_p99_tpot_ms": -1}, ["query", "slo_p99_tpot_ms"]),
        ({"slo_p99_ttft_ms": 1e9}, ["query", "slo_p99_ttft_ms"]),
        ({"concurrency": 3}, ["query", "concurrency"]),
        ({"workload": "chat"}, ["query", "workload"]),
    ],
)
def test_pareto_bad_query_is_422(done, params, loc):
    c, job_id, _ = done
    r = c.get(f"/api/jobs/{job_id}/pareto", params=params)
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == loc


def test_export(done):
    c, job_id, _ = done
    rep = c.get(f"/api/jobs/{job_id}/pareto").json()
    r = c.get(f"/api/jobs/{job_id}/export", params={"format": "vllm-json"})
    assert r.status_code == 200
    out = r.json()
    assert out["trial_number"] == rep["winner_trial"]
    spec = json.loads(out["text"])
    winner = next(p for p in rep["points"] if p["is_winner"])
    assert (spec is None) == (winner["method"] == "none")
    if spec is not None:
        assert spec["method"] == winner["method"]
    line = c.get(f"/api/jobs/{job_id}/export", params={"format": "vllm-cli"}).json()["text"]
    *notes, command = line.splitlines()  # the command is one line, notes are comments
    assert "vllm serve " in command and all(n.startswith("# ") for n in notes)
    sg = c.get(f"/api/jobs/{job_id}/export", params={"format": "sglang"}).json()["text"]
    assert sg.startswith("python -m sglang.launch_server --model-path ")
    assert ("--speculative-algorithm" in sg) == (spec is not None)
    trt = yaml.safe_load(
        c.get(f"/api/jobs/{job_id}/export", params={"format": "trtllm-yaml"}).json()["text"]
    )
    assert trt["max_batch_size"] == winner["params"]["max_num_seqs"]
    if spec is not None:
        assert trt["speculative_config"]["max_draft_len"] == spec["num_speculative_tokens"]
    assert c.get(f"/api/jobs/{job_id}/export", params={"format": "onnx"}).status_code == 422
    r = c.get(f"/api/jobs/{job_id}/export", params={"slo_p99_tpot_ms": 1e-6})
    assert r.status_code == 409 and "no feasible configuration" in r.json()["detail"]


def test_export_formats_are_the_engines_list(client):
    r = client.get("/api/export-formats")
    assert r.status_code == 200
    assert r.json() == {
        "formats": [
            {"name": f.name, "label": f.label, "engine": f.engine, "description": f.description}
            for f in EXPORT_FORMATS
        ]
    }
    names = [f["name"] for f in r.json()["formats"]]
    assert names == ["vllm-json", "vllm-cli", "vllm-schedule-json", "sglang", "trtllm-yaml"]
    # the export route takes exactly these names
    schema = client.get("/openapi.json").json()["paths"]["/api/jobs/{job_id}/export"]["get"]
    fmt = next(p for p in schema["parameters"] if p["name"] == "format")["schema"]
    assert fmt["enum"] == names
    assert [f.name for f in SpecTuneClient(http=client).export_formats().formats] == names


def test_cancel_a_finished_job_is_409(done):
    c, job_id, _ = done
    r = c.post(f"/api/jobs/{job_id}/cancel")
    assert r.status_code == 409 and "succeeded" in r.json()["detail"]


def test_typed_client(done):
    c, job_id, _ = done
    api = SpecTuneClient(http=c)
    job = api.wait(job_id, poll_s=0.01, timeout_s=1)
    assert job.state == "succeeded"
    assert api.pareto(job_id, slo={"p99_tpot_ms": 1e-6}).winner_trial is None
    assert api.trials(job_id, limit=2).total == 4
    assert api.trial(job_id, 0).method == "none"
    json.loads(api.export(job_id, "vllm-json"))
    assert [p.name for p in api.presets()] == ["fake-small"]
    with pytest.raises(ApiError) as e:
        api.submit(preset="no-such")
    assert e.value.status == 422 and e.value.errors[0]["loc"] == ["body", "preset"]
    with pytest.raises(ApiError) as e:
        api.job(12345)
    assert e.value.status == 404


# --------------------------------------------------------------------------- REST conventions


def test_openapi_operation_ids_and_problem_responses(client):
    doc = client.get("/openapi.json").json()
    ops = [(p, m, op) for p, item in doc["paths"].items() for m, op in item.items()]
    ids = [op["operationId"] for _, _, op in ops]
    assert len(ids) == len(set(ids))
    assert {"submit_job", "get_job", "cancel_job", "get_pareto", "export_winner"} <= set(ids)
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path, method, op in ops:
        codes = op["responses"]
        if path.startswith("/api/"):
            assert "429" in codes, (method, path)
        if op.get("security"):
            assert {"401", "503"} <= set(codes), (method, path)
        for code, resp in codes.items():
            if int(code) >= 400 and path != "/readyz":
                assert resp["content"] == problem, (method, path, code)
    submit = doc["paths"]["/api/jobs"]["post"]
    assert {"200", "201", "409", "413", "422"} <= set(submit["responses"])
    assert any(
        p["name"] == "Idempotency-Key" and p["in"] == "header" for p in submit["parameters"]
    )
    assert "HTTPValidationError" not in doc["components"]["schemas"]


def test_errors_are_problem_documents(client):
    r = client.get("/api/jobs/999")
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json() == {
        "type": "about:blank",
        "title": "Not Found",
        "status": 404,
        "detail": "job 999 not found",
        "instance": "/api/jobs/999",
    }
    r = client.post("/api/jobs", json={"preset": "fake-small", "trials": 0})
    body = r.json()
    assert r.status_code == 422 and body["type"] == "urn:spectune:problem:validation-error"
    assert body["errors"][0]["loc"] == ["body", "trials"] and "body.trials" in body["detail"]


def test_idempotency_key_header_wins_over_the_body(client, settings):
    body = {"preset": "fake-small", "idempotency_key": "from-body"}
    first = client.post("/api/jobs", json=body, headers={"Idempotency-Key": "h-1"})
    assert first.status_code == 201
    # the same header, another body key: the header decides, so it is a repeat
    again = client.post(
        "/api/jobs", json={"preset": "fake-small"}, headers={"Idempotency-Key": "h-1"}
    )
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    # the body's key was not used: it still makes a new job
    assert client.post("/api/jobs", json=body).status_code == 201
    other = client.post(
        "/api/jobs", json={"preset": "fake-small", "trials": 2}, headers={"Idempotency-Key": "h-1"}
    )
    assert other.status_code == 409 and other.headers["content-type"] == "application/problem+json"
    bad = client.post("/api/jobs", json=body, headers={"Idempotency-Key": "has space"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["loc"] == [
        "header",
        "Idempotency-Key",
    ]
    assert job_count(settings.database_url) == 2
