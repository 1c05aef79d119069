"""Every method through the same job code: EAGLE / EAGLE-3 heads and MTP on the committed tiny
checkpoints (pre-flight on the real files), MTP served from another checkpoint reported as its
own target, and the SGLang backend against a FAKE SGLang server (tests/fake_sglang_server.py:
SGLang needs CUDA, so its contract is tested here and it runs for real only on a GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import (
    FAKE_SGLANG,
    REPO,
    TINY,
    run_fake_job,
    run_on_fake_sglang,
    trial_records,
)
from tests.helpers import every_method_space as _space
from tuner import cli
from tuner.candidates import engine_config
from tuner.cli._render import other_target_text
from tuner.engines import EngineConfig, SGLangProbe, parse_sglang_spec_gauges, sglang_spec_stats
from tuner.pareto import job_report
from tuner.preflight import PreflightError, preflight
from tuner.space import SpaceError, loads_space
from tuner.storage import Store
from tuner.surface import grid_configs, grid_params, params_to_config


def test_committed_heads_pass_preflight_and_a_wrong_pairing_is_refused():
    t = str(TINY / "target")
    for method in ("eagle", "eagle3"):
        spec = {"method": method, "model": str(TINY / method), "num_speculative_tokens": 3}
        preflight(EngineConfig(model=t, speculative_config=spec), memory_bytes=None)
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    preflight(
        EngineConfig(model=str(TINY / "target-mtp"), speculative_config=mtp), memory_bytes=None
    )
    with pytest.raises(PreflightError, match="no MTP layers"):
        preflight(EngineConfig(model=t, speculative_config=mtp), memory_bytes=None)
    # An EAGLE-1 head given as eagle3 (wrong architecture and fc width) costs no launch.
    wrong = {"method": "eagle3", "model": str(TINY / "eagle"), "num_speculative_tokens": 1}
    with pytest.raises(PreflightError, match="methods.eagle3"):
        preflight(EngineConfig(model=t, speculative_config=wrong), memory_bytes=None)


def test_space_samples_every_method_with_its_own_parameters():
    space = _space()
    configs = grid_configs(space)
    methods = {c["method"] for c in configs}
    assert methods == {"none", "ngram", "draft_model", "eagle", "eagle3", "mtp"}
    # Two baselines: engine.model's and the MTP checkpoint's (another target).
    bases = [c for c in configs if c["method"] == "none"]
    assert [b.get("target") for b in bases] == [None, f"{TINY}/target-mtp"]
    for p in grid_params(space):
        c = params_to_config(p, space)
        cfg = engine_config(c, space)
        if c["method"] in ("eagle", "eagle3"):
            assert cfg.speculative_config["model"] == str(TINY / c["method"])
            assert cfg.model == str(TINY / "target")
        if c["method"] == "mtp" or c.get("target"):
            assert cfg.model == str(TINY / "target-mtp")  # served from its own checkpoint
    with pytest.raises(SpaceError, match=r"start_with.0: head 'nope' is not one of"):
        text = _space().model_dump(mode="json")
        text["start_with"][0]["head"] = "nope"
        loads_space(json.dumps(text), base_dir=REPO)


def test_job_runs_every_method_and_reports_mtp_against_its_own_baseline(
    db_url, fake_launcher, tmp_path, capsys
):
    space = _space(trials=5)
    job_id = run_fake_job(db_url, space, tmp_path / "w", fake_launcher)
    recs = {r["number"]: r for r in trial_records(db_url, job_id)}
    assert [recs[n]["method"] for n in range(5)] == ["none", "none", "eagle", "eagle3", "mtp"]
    assert recs[1]["params"]["target"] == f"{TINY}/target-mtp"
    assert all(recs[n]["state"] == "complete" for n in range(5))
    # The MTP trial's greedy outputs were checked against its own target's baseline.
    assert recs[4]["lossless_match_rate"] == 1.0
    main = job_report(Store(db_url), job_id)
    assert main.target == str(TINY / "target")
    assert {p.method for p in main.points} == {"none", "eagle", "eagle3"}
    assert main.baseline is not None and main.baseline.trial_number == 0
    assert main.other_targets == (str(TINY / "target-mtp"),)
    other = job_report(Store(db_url), job_id, target=str(TINY / "target-mtp"))
    assert other.baseline is not None and other.baseline.trial_number == 1
    assert {p.method for p in other.points} == {"none", "mtp"}
    assert set(other.verdicts) == {4}  # MTP's verdict is against trial 1, not trial 0
    with pytest.raises(ValueError, match="was not measured"):
        job_report(Store(db_url), job_id, target="/elsewhere")
    # The API answers each target apart; an unknown one is a 422 naming the field.
    from fastapi.testclient import TestClient

    from tests.helpers import make_settings
    from tuner.api import create_app

    with TestClient(
        create_app(make_settings(tmp_path, database_url=db_url), run_worker=False)
    ) as c:
        main_api = c.get(f"/api/jobs/{job_id}/pareto").json()
        assert main_api["target"] == str(TINY / "target")
        assert main_api["other_targets"] == [str(TINY / "target-mtp")]
        assert {p["method"] for p in main_api["points"]} == {"none", "eagle", "eagle3"}
        r = c.get(f"/api/jobs/{job_id}/pareto", params={"target": str(TINY / "target-mtp")})
        assert r.status_code == 200 and r.json()["baseline_trial"] == 1
        assert {p["method"] for p in r.json()["points"]} == {"none", "mtp"}
        bad = c.get(f"/api/jobs/{job_id}/pareto", params={"target": "/elsewhere"})
        assert bad.status_code == 422 and "target" in json.dumps(bad.json())
    other = job_report(Store(db_url), job_id, target=str(TINY / "target-mtp"))
    text = other_target_text(other, main.target)
    assert "Another target in this job: " + str(TINY / "target-mtp") in text
    assert "mtp k=1 on target-mtp" in text and "baseline (no speculation) on target-mtp" in text
    assert cli.main(["export", str(job_id), "--db", db_url, "--format", "vllm-cli"]) == 0


def test_sglang_gauges_are_parsed_and_averaged():
    text = (
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.5\n'
        "# TYPE sglang:spec_accept_rate gauge\n"
        'sglang:spec_accept_rate{model_name="m",tp_rank="0"} 0.5\n'
    )
    assert parse_sglang_spec_gauges(text) == (2.5, 0.5)
    assert parse_sglang_spec_gauges(text.replace("2.5", "0.0")) is None  # nothing drafted yet
    assert parse_sglang_spec_gauges("# TYPE x gauge\nx 1\n") is None
    st = sglang_spec_stats([(2.0, 0.4), (3.0, 0.6)])
    assert st is not None and st.mean_acceptance_length == 2.5 and st.acceptance_rate == 0.5


def test_sglang_backend_launches_with_a_consistent_triple_and_reads_its_gauges(db_url, tmp_path):
    space = _space(kind="sglang", device="cuda", trials=4)
    data = space.model_dump(mode="json")
    data["methods"].pop("mtp")
    data["start_with"] = [s for s in data["start_with"] if s["method"] != "mtp"]
    space = loads_space(json.dumps(data), base_dir=REPO)
    recs = {r["number"]: r for r in run_on_fake_sglang(db_url, tmp_path, space)}
    assert [recs[n]["state"] for n in range(3)] == ["complete"] * 3
    for n in (1, 2):  # eagle and eagle3 at depth 3
        assert recs[n]["acceptance_rate"] is not None and recs[n]["acceptance_rate"] > 0
        assert recs[n]["mean_acceptance_length"] > 1.0
        assert recs[n]["lossless_match_rate"] == 1.0  # greedy ids from SGLang's /generate
        argv = Path(recs[n]["log_path"]).read_text().splitlines()[0]
        assert "--speculative-num-steps 3 --speculative-eagle-topk 1" in argv
        assert "--speculative-num-draft-tokens 4" in argv and "--enable-metrics" in argv
    assert "EAGLE3" in Path(recs[2]["log_path"]).read_text().splitlines()[0]
    assert recs[0]["acceptance_rate"] is None  # the baseline drafts nothing


def test_hosted_literal_key_is_refused_naming_the_field():
    data = _space().model_dump(mode="json")
    data["hosted"] = [{"name": "p", "base_url": "http://x", "model": "m", "api_key": "sk-1"}]
    with pytest.raises(SpaceError, match=r"hosted.0: api_key: keys are never stored"):
        loads_space(json.dumps(data), base_dir=REPO)
    data["hosted"] = [{"name": "p", "base_url": "ftp://x", "model": "m"}]
    with pytest.raises(SpaceError, match=r"hosted.0.base_url"):
        loads_space(json.dumps(data), base_dir=REPO)


@pytest.fixture
def hosted_server():
    """The FAKE OpenAI server standing in for a provider that wants a key."""
    import subprocess

    from tuner.client import wait_until_up
    from tuner.engines import free_port

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[1] / "fake_openai_server.py"),
            "--port",
            str(port),
            "--fake-require-key",
            "sk-test-123",
        ],
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    assert wait_until_up(url + "/health", timeout_s=30, alive=lambda: proc.poll() is None)
    yield url
    proc.terminate()
    proc.wait(10)


def test_hosted_endpoints_are_measured_as_reference_rows_and_the_key_is_not_stored(
    db_url, fake_launcher, tmp_path, hosted_server, monkeypatch, capsys
):
    monkeypatch.setenv("SPECTUNE_TEST_KEY", "sk-test-123")
    monkeypatch.setenv("SPECTUNE_WRONG_KEY", "sk-nope")
    monkeypatch.delenv("SPECTUNE_MISSING_KEY", raising=False)
    data = _space(trials=1).model_dump(mode="json")
    data["hosted"] = [
        {
            "name": "provider",
            "base_url": hosted_server + "/v1",
            "model": "fake",
            "api_key_env": "SPECTUNE_TEST_KEY",
        },
        {
            "name": "wrong-key",
            "base_url": hosted_server,
            "model": "fake",
            "api_key_env": "SPECTUNE_WRONG_KEY",
        },
        {
            "name": "no-key",
            "base_url": hosted_server,
            "model": "fake",
            "api_key_env": "SPECTUNE_MISSING_KEY",
        },
    ]
    space = loads_space(json.dumps(data), base_dir=REPO)
    job_id = run_fake_job(db_url, space, tmp_path / "w", fake_launcher)
    rep = job_report(Store(db_url), job_id)
    refs = {r.name: r for r in rep.references}
    ok = refs["provider"]
    assert ok.metrics is not None and ok.metrics["output_tok_per_s"] > 0
    assert ok.metrics["num_failed"] == 0 and ok.metrics["acceptance_rate"] is None
    assert ok.base_url == hosted_server  # /v1 stripped: the client adds /v1/completions
    assert refs["wrong-key"].metrics is None and "401" in (refs["wrong-key"].error or "")
    assert refs["no-key"].error == "environment variable SPECTUNE_MISSING_KEY is not set"
    assert rep.winner is None or rep.winner.method != "hosted"  # never a candidate
    db_file = Path(db_url.removeprefix("sqlite:///"))
    assert b"sk-test-123" not in db_file.read_bytes()  # the key itself is stored nowhere
    # A resumed job does not measure the endpoints again.
    from tuner.measure import measure_references

    measure_references(Store(db_url), job_id, space, {"code_completion": []})
    assert len(job_report(Store(db_url), job_id).references) == 3


def test_sglang_acceptance_falls_back_to_server_info_without_metrics():
    """SGLang started without --enable-metrics: no /metrics, so /server_info's
    avg_spec_accept_length is the acceptance (FAKE SGLang server)."""
    import asyncio
    import subprocess

    from tuner.client import wait_until_up
    from tuner.engines import free_port
    from tuner.loadgen import measure
    from tuner.workloads import builtin_path, read_jsonl

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(FAKE_SGLANG),
            "--model-path",
            "m",
            "--port",
            str(port),
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-draft-model-path",
            "h",
            "--speculative-num-steps",
            "2",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "3",
        ],
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_until_up(url + "/health", timeout_s=30, alive=lambda: proc.poll() is None)
        m = asyncio.run(
            measure(
                url,
                "fake",
                read_jsonl(builtin_path("code_completion"))[:4],
                workload="w",
                concurrency=2,
                num_requests=4,
                max_tokens=16,
                warmup_requests=0,
                probe=SGLangProbe(),
            )
        )
    finally:
        proc.terminate()
        proc.wait(10)
    assert m.num_failed == 0
    assert m.mean_acceptance_length is not None and m.mean_acceptance_length > 1.0
    assert m.acceptance_rate is None  # /server_info has no rate


def test_fake_sglang_refuses_an_inconsistent_triple_as_sglang_does():
    """The contract the flags are written against: top-k 1 needs draft tokens = steps + 1."""
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            str(FAKE_SGLANG),
            "--model-path",
            "m",
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-draft-model-path",
            "h",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1 and "num_steps + 1" in out.stdout


@pytest.mark.parametrize(
    "methods, field",
    [
        ("{eagle: {heads: [h, h]}}", "methods.eagle.heads: paths must not repeat"),
        ("{eagle3: {heads: []}}", "methods.eagle3.heads"),
        (
            "{mtp: {num_speculative_tokens: {min: 0, max: 1}}}",
            "methods.mtp.num_speculative_tokens",
        ),
        ("{draft_model: {drafts: [d, d]}}", "methods.draft_model.drafts: paths must not repeat"),
    ],
)
def test_bad_method_fields_are_refused_by_name(methods, field):
    with pytest.raises(SpaceError, match=field.replace(".", r"\.")):
        loads_space(f"name: t\nengine: {{model: m}}\nmethods: {methods}\n")
