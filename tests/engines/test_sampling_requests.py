"""The workload's sampling settings go on every request the load generator sends, warm-up
included, and the probes ask for sampled token ids the way each engine takes them (FAKE
servers; tests/engines/test_sampling_vllm.py checks it once on real vLLM)."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path

import pytest

from tuner.engines import EngineConfig, SGLangProbe, VLLMProbe, VLLMServer
from tuner.engines._vllm import VLLMServer as _V
from tuner.loadgen import measure
from tuner.workloads import Prompt

FAKE = Path(__file__).resolve().parents[1] / "fake_openai_server.py"
PROMPTS = [Prompt("def f(x):\n"), Prompt("import os\n", max_tokens=8)]


def _seen(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "/fake/seen", timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.parametrize(
    "sampling",
    [None, {"temperature": 0.8, "top_p": 0.95}, {"temperature": 1.0, "top_k": 20, "seed": 7}],
)
def test_every_request_carries_the_workloads_sampling(tmp_path, sampling):
    cfg = EngineConfig(model="/fake", served_model_name="fake")
    srv = VLLMServer(
        cfg,
        tmp_path / "fake.log",
        cache_root=tmp_path / "c",
        startup_timeout_s=30,
        launcher=[sys.executable, str(FAKE)],
    )
    with srv:
        asyncio.run(
            measure(
                srv.base_url,
                "fake",
                PROMPTS,
                workload="w",
                concurrency=2,
                num_requests=6,
                max_tokens=8,
                warmup_requests=2,
                timeout_s=10,
                probe=srv.probe,
                sampling=sampling,
            )
        )
        seen = _seen(srv.base_url)
    assert len(seen) == 8  # 2 warm-up + 6 measured
    assert all(s == (sampling or {"temperature": 0.0}) for s in seen)


def test_vllm_probe_asks_for_n_seeded_samples_and_greedy_as_before():
    p = VLLMProbe()
    greedy = p._ids_body("m", "x", 4, {"temperature": 0.0}, 1, 0)
    assert greedy == {
        "model": "m",
        "prompt": "x",
        "max_tokens": 4,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    sampled = p._ids_body("m", "x", 4, {"temperature": 0.8, "top_p": 0.95}, 48, 1000)
    assert (sampled["n"], sampled["seed"], sampled["top_p"]) == (48, 1000, 0.95)
    answer = {"choices": [{"index": 1, "token_ids": [2]}, {"index": 0, "token_ids": [1]}]}
    assert p._ids_of(answer) == [[1], [2]]  # in sample order


def test_sglang_probe_batches_the_prompt_with_one_seed_per_sample():
    body = SGLangProbe()._ids_body("m", "x", 4, {"temperature": 0.8, "seed": 3}, 3, 50)
    assert body["text"] == ["x"] * 3
    assert [sp["sampling_seed"] for sp in body["sampling_params"]] == [50, 51, 52]
    assert all(sp["temperature"] == 0.8 and "seed" not in sp for sp in body["sampling_params"])
    assert SGLangProbe()._ids_of([{"output_ids": [1]}, {"output_ids": [2]}]) == [[1], [2]]


def test_draft_sampling_is_refused_where_the_engine_lacks_it(monkeypatch):
    from tuner.engines import SGLangServer

    spec = {"method": "draft_model", "num_speculative_tokens": 2, "draft_sample_method": "x"}
    assert "engine sglang has no draft sampling option" in SGLangServer.speculative_problem(spec)
    assert SGLangServer.speculative_problem({**spec, "draft_sample_method": "greedy"}) is None
    monkeypatch.setattr("tuner.engines._vllm.vllm_has_spec_field", lambda name: False)
    assert "installed vLLM" in _V.speculative_problem({**spec, "draft_sample_method": "x"})
    monkeypatch.setattr("tuner.engines._vllm.vllm_has_spec_field", lambda name: True)
    assert _V.speculative_problem({**spec, "draft_sample_method": "probabilistic"}) is None
