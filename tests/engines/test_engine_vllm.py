"""Real vLLM on the CPU with the tiny in-repo pair: the same code path as on a GPU.

Slow (each launch ~30 s with --enforce-eager); run one engine at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.helpers import REPO, TINY, vllm_available
from tuner import cli
from tuner.api import create_app
from tuner.api.settings import ServiceSettings
from tuner.client import wait_until_up
from tuner.engines import EngineConfig, VLLMServer, free_port
from tuner.loadgen import measure
from tuner.storage import Store
from tuner.worker import Worker
from tuner.workloads import builtin_path, read_jsonl

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed"),
    pytest.mark.timeout(900),
]

TARGET = str(TINY / "target")
DRAFT = str(TINY / "draft")
PROMPTS = read_jsonl(builtin_path("code_completion"))[:8]


def _cfg(spec, model=TARGET):
    return EngineConfig(
        model=model,
        served_model_name="tiny",
        max_model_len=512,
        max_num_seqs=4,
        memory_fraction=0.1,
        speculative_config=spec,
        enforce_eager=True,
    )


def _measure(srv: VLLMServer):
    return asyncio.run(
        measure(
            srv.base_url,
            "tiny",
            PROMPTS,
            workload="code_completion",
            concurrency=2,
            num_requests=8,
            max_tokens=32,
            warmup_requests=1,
            timeout_s=120,
            probe=srv.probe,
        )
    )


@pytest.mark.parametrize(
    "spec",
    [
        None,
        {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 4,
        },
        {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 3},
        # The committed trained heads (scripts/train_heads.py): every method, for real.
        {"method": "eagle", "model": str(TINY / "eagle"), "num_speculative_tokens": 3},
        {"method": "eagle3", "model": str(TINY / "eagle3"), "num_speculative_tokens": 2},
        {"method": "mtp", "num_speculative_tokens": 1},
    ],
    ids=["baseline", "ngram", "draft_model", "eagle", "eagle3", "mtp"],
)
def test_real_engine_measures_and_spec_counters_move(spec, tmp_path):
    # MTP is served from the MiMo checkpoint that carries the MTP layer.
    model = str(TINY / "target-mtp") if spec and spec["method"] == "mtp" else TARGET
    with VLLMServer(
        _cfg(spec, model),
        tmp_path / "engine.log",
        cache_root=tmp_path / "cache",
        startup_timeout_s=300,
    ) as srv:
        m = _measure(srv)
        assert srv.alive()
    assert m.num_failed == 0, m.errors
    # what the engine reported at start, and the memory its process tree peaked at
    assert (srv.kv_cache_tokens() or 0) > 0 and (srv.peak_rss_mb or 0) > 100
    assert m.output_tokens == 8 * 32  # ignore_eos: every request gives exactly max_tokens
    assert m.output_tok_per_s > 0 and m.p99_tpot_ms > 0 and m.p99_ttft_ms > 0
    if spec is None:
        assert m.acceptance_rate is None
        return
    assert m.num_drafts > 0 and m.num_draft_tokens > 0
    assert 0 < m.acceptance_rate <= 1
    assert 1 < m.mean_acceptance_length <= 1 + spec["num_speculative_tokens"]
    assert len(m.per_position_acceptance) == spec["num_speculative_tokens"]
    # acceptance can only fall with position: a later token needs the earlier ones accepted
    pp = m.per_position_acceptance
    assert all(a >= b for a, b in zip(pp, pp[1:], strict=False))


SPACE = f"""
name: engine-test
engine: {{model: {TARGET}, served_model_name: tiny, enforce_eager: true,
          startup_timeout_s: 300}}
methods:
  draft_model: {{num_speculative_tokens: {{min: 2, max: 3}}, drafts: [{DRAFT}]}}
max_num_seqs: [4]
concurrency: [2]
workload: {{num_prompts: 8, max_tokens: 32, warmup_requests: 1}}
start_with: [{{method: draft_model, num_speculative_tokens: 3}}]
measurement: {{repeats: 2, confirm_top: 1, max_relative_mad: 5, prune: false}}
lossless: {{num_prompts: 4, max_tokens: 16}}
trials: 2
seed: 0
"""


def _wait_health(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    if not wait_until_up(url + "/health", timeout_s=timeout, alive=lambda: proc.poll() is None):
        assert proc.poll() is None, "exported command exited"
        pytest.fail("exported command never became ready")


def test_cli_run_and_exported_command_starts_vllm(tmp_path, capsys):
    # Imported here, as in the API test below: the measuring tests need only the engines.
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    rc = cli.main(["run", str(space), "--db", db, "--work-dir", str(tmp_path / "work")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Pareto front" in out and "baseline" in out and "Winner command line:" in out
    assert cli.main(["trials", "1", "--json", "--db", db]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert [r["state"] for r in recs] == ["complete", "complete"]
    assert recs[1]["method"] == "draft_model" and 0 < recs[1]["acceptance_rate"] <= 1
    # measured for real: greedy outputs match the baseline's, memory and KV capacity known
    assert recs[0]["lossless_match_rate"] is None and recs[1]["lossless_match_rate"] >= 0.5
    assert recs[1]["kv_cache_tokens"] > 0 and recs[1]["peak_rss_mb"] > 100
    assert recs[1]["repeats"] == 2 and recs[1]["stats"]["output_tok_per_s"]["n"] == 2
    assert "Round-cost verdict" in out

    assert cli.main(["export", "1", "--format", "vllm-cli", "--db", db]) == 0
    line = capsys.readouterr().out.strip()
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(tmp_path / "cache"),
    }
    # The exported line, verbatim, plus where to listen.
    cmd = f"{line} --host 127.0.0.1 --port {port} --served-model-name tiny"
    with (tmp_path / "export.log").open("wb") as log:
        proc = subprocess.Popen(
            ["bash", "-c", cmd],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
        )
    try:
        _wait_health(f"http://127.0.0.1:{port}", proc)
        body = json.dumps(
            {"model": "tiny", "prompt": "def main():\n", "max_tokens": 8, "temperature": 0}
        ).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 8
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_api_job_end_to_end_on_real_engine(tmp_path):
    """Submit through the REST API, let a worker run it on real vLLM, read Pareto + export."""
    url = f"sqlite:///{tmp_path / 'api.db'}"
    settings = ServiceSettings(database_url=url, work_dir=tmp_path / "work")
    with TestClient(create_app(settings, run_worker=False)) as c:
        text = SPACE.replace("confirm_top: 1", "confirm_top: 0")
        r = c.post("/api/jobs", json={"search_space_yaml": text, "trials": 2})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        assert Worker(Store(url), work_dir=tmp_path / "work").run_once() == job_id
        job = c.get(f"/api/jobs/{job_id}").json()
        assert job["state"] == "succeeded", job
        pareto = c.get(f"/api/jobs/{job_id}/pareto").json()
        assert pareto["points"], pareto
        r = c.get(f"/api/jobs/{job_id}/export", params={"format": "vllm-json"})
        assert r.status_code == 200, r.text
        spec = json.loads(r.json()["text"])
        assert spec is None or spec["method"] == "draft_model"
