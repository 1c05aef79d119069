"""The load generator against the FAKE OpenAI server (no real engine is measured here)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tuner.engines import EngineConfig, VLLMServer
from tuner.loadgen import measure
from tuner.workloads import Prompt, WorkloadError, read_jsonl

FAKE = Path(__file__).resolve().parent / "fake_openai_server.py"
PROMPTS = [Prompt("def f(x):\n"), Prompt("import os\n", max_tokens=8)]


def _fake(tmp_path, spec=None, *extra):
    cfg = EngineConfig(
        model="/fake", served_model_name="fake", speculative_config=spec, extra_args=tuple(extra)
    )
    return VLLMServer(
        cfg,
        tmp_path / "fake.log",
        cache_root=tmp_path / "c",
        startup_timeout_s=30,
        launcher=[sys.executable, str(FAKE)],
    )


def _measure(srv, **kw):
    args = dict(
        workload="w", concurrency=2, num_requests=6, max_tokens=20, warmup_requests=1, timeout_s=10
    )
    args.update(kw)
    return asyncio.run(measure(srv.base_url, "fake", PROMPTS, **args))


def test_baseline_counts_tokens_and_has_no_acceptance(tmp_path):
    with _fake(tmp_path) as srv:
        m = _measure(srv)
    assert m.num_ok == 6 and m.num_failed == 0
    # prompts alternate: 3 x 20 tokens + 3 x 8 tokens (a prompt's own max_tokens wins)
    assert m.output_tokens == 3 * 20 + 3 * 8
    assert m.acceptance_rate is None
    assert m.p99_tpot_ms is not None and m.p99_tpot_ms > 0
    assert m.p50_ttft_ms <= m.p99_ttft_ms


def test_speculative_acceptance_from_counter_deltas(tmp_path):
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    with _fake(tmp_path, spec, "--fake-acceptance", "1.0") as srv:
        m = _measure(srv, warmup_requests=2)
    # every draft accepted: rate 1, length k + 1, each position 1.0
    assert m.acceptance_rate == pytest.approx(1.0)
    assert m.mean_acceptance_length == pytest.approx(4.0)
    assert m.per_position_acceptance == pytest.approx([1.0, 1.0, 1.0])
    assert m.num_drafts > 0
    with _fake(tmp_path, spec, "--fake-acceptance", "0.0") as srv:
        m0 = _measure(srv)
    assert m0.acceptance_rate == 0.0 and m0.mean_acceptance_length == 1.0


def test_dropped_stream_is_a_counted_failure(tmp_path):
    with _fake(tmp_path, None, "--fake-drop-after", "3") as srv:
        m = _measure(srv)
    assert m.num_failed == 6 and m.num_ok == 0
    assert m.output_tok_per_s == 0 and m.p99_tpot_ms is None
    assert m.errors


def test_http_errors_are_counted(tmp_path):
    with _fake(tmp_path, None, "--fake-http-error", "500") as srv:
        m = _measure(srv)
    assert m.num_failed == 6
    assert any("HTTP 500" in e for e in m.errors)


def test_workload_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "w.jsonl"
    bad.write_text(json.dumps({"prompt": "a"}) + "\nnot json\n")
    with pytest.raises(WorkloadError, match=r"w.jsonl:2: not JSON"):
        read_jsonl(bad)
    bad.write_text(json.dumps({"prompt": ""}) + "\n")
    with pytest.raises(WorkloadError, match=r":1: prompt: must be a non-empty string"):
        read_jsonl(bad)
    bad.write_text(json.dumps({"prompt": "x", "max_tokens": 0}) + "\n")
    with pytest.raises(WorkloadError, match=r"max_tokens: must be a positive integer"):
        read_jsonl(bad)
    bad.write_text("\n\n")
    with pytest.raises(WorkloadError, match="no prompts"):
        read_jsonl(bad)


def test_builtin_workload_is_shipped():
    from tuner.workloads import builtin_path

    prompts = read_jsonl(builtin_path("code_completion"))
    assert len(prompts) >= 20
    assert all(p.prompt.strip() for p in prompts)


def test_open_loop_poisson_arrivals(tmp_path):
    with _fake(tmp_path) as srv:
        m = _measure(srv, request_rate=40.0, concurrency=8, num_requests=10)
    assert m.num_ok == 10 and m.request_rate_per_s == 40.0
    assert len(m.ttft_ms_values) == 10 and len(m.e2e_ms_values) == 10


def test_greedy_token_ids_and_prefix_reset(tmp_path):
    from tuner.loadgen import greedy_token_ids, reset_prefix_cache

    with _fake(tmp_path) as srv:
        ids = asyncio.run(greedy_token_ids(srv.base_url, "fake", ["a", "b"], 5))
        assert asyncio.run(reset_prefix_cache(srv.base_url)) is True
    assert [len(x) for x in ids] == [5, 5] and ids[0] != ids[1]
