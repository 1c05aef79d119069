"""The load generator and the engines' probes against the FAKE OpenAI and SGLang servers (no
real engine is measured here)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import pytest

from tuner.engines import (
    EngineConfig,
    HostedProbe,
    HostedServer,
    SGLangProbe,
    SGLangServer,
    VLLMProbe,
    VLLMServer,
)
from tuner.loadgen import LoadError, measure
from tuner.workloads import Prompt, WorkloadError, read_jsonl

TESTS = Path(__file__).resolve().parents[1]
FAKE = TESTS / "fake_openai_server.py"
FAKE_SGLANG = TESTS / "fake_sglang_server.py"
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
        workload="w",
        concurrency=2,
        num_requests=6,
        max_tokens=20,
        warmup_requests=1,
        timeout_s=10,
        probe=srv.probe,
        headers=srv.headers,
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


def test_chunked_streams_are_timed_per_chunk_and_flagged(tmp_path):
    """Chunks that carry several tokens, and chunks whose text is empty, are timed as vLLM's
    benchmark times them: TTFT at the first chunk with a choice, end at the last one."""
    step_ms = 20.0
    with _fake(tmp_path, None, "--fake-token-ms", str(step_ms)) as srv:
        plain = _measure(srv, concurrency=1, num_requests=2, warmup_requests=0)
    assert not plain.multi_token_chunks and plain.tokens_per_chunk == 1.0
    assert plain.empty_text_chunks == 0 and plain.stream_chunks == 28
    # Five empty-text chunks open every answer: the first token still arrives after one step.
    with _fake(
        tmp_path, None, "--fake-token-ms", str(step_ms), "--fake-empty-text-chunks", "5"
    ) as srv:
        empty = _measure(srv, concurrency=1, num_requests=2, warmup_requests=0)
    assert empty.empty_text_chunks == 10 and not empty.multi_token_chunks
    assert empty.mean_ttft_ms < 3 * step_ms  # not at the sixth chunk (the first with text)
    assert empty.mean_tpot_ms == pytest.approx(plain.mean_tpot_ms, rel=0.25)
    # Four tokens a chunk: flagged; TPOT spreads each request's time over all its tokens.
    with _fake(
        tmp_path, None, "--fake-token-ms", str(step_ms), "--fake-tokens-per-chunk", "4"
    ) as srv:
        batched = _measure(srv, concurrency=1, num_requests=2, warmup_requests=0)
    assert batched.multi_token_chunks and batched.tokens_per_chunk == pytest.approx(4.0)
    assert batched.output_tokens == 28 and batched.stream_chunks == 7
    assert batched.mean_tpot_ms == pytest.approx(plain.mean_tpot_ms / 4, rel=0.5)
    assert batched.mean_itl_ms == pytest.approx(step_ms, rel=0.5)  # per chunk, as vLLM's


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
    probe = VLLMProbe()
    with _fake(tmp_path) as srv:
        ids = asyncio.run(
            probe.greedy_token_ids(srv.base_url, "fake", [Prompt("a"), Prompt("b")], 5)
        )
        assert asyncio.run(probe.reset_prefix_cache(srv.base_url)) is True
    assert [len(x) for x in ids] == [5, 5] and ids[0] != ids[1]


def test_vllm_probe_needs_metrics(tmp_path):
    """vLLM's window reads /metrics before and after: without it, a LoadError."""
    with _sglang(tmp_path, metrics=False) as srv:  # an engine with no /metrics
        with pytest.raises(LoadError, match="/metrics answered HTTP 404"):
            _measure(srv, probe=VLLMProbe())


class _NoSession:
    def __init__(self, *a, **kw):
        raise AssertionError("the hosted probe must not open a connection")


def test_hosted_probe_makes_no_request(monkeypatch):
    probe = HostedProbe()
    monkeypatch.setattr(aiohttp, "ClientSession", _NoSession)

    async def window() -> tuple:
        async with probe.window("http://127.0.0.1:9") as reading:
            pass
        return reading.spec, reading.mean_queue_ms

    assert asyncio.run(window()) == (None, None)
    assert asyncio.run(probe.reset_prefix_cache("http://127.0.0.1:9")) is False
    ids = asyncio.run(
        probe.greedy_token_ids("http://127.0.0.1:9", "m", [Prompt("a"), Prompt("b")], 4)
    )
    assert ids == [None, None]


def test_hosted_endpoint_measured_with_its_key_and_no_counters(tmp_path):
    """The FAKE server wants a key and has spec counters; the hosted probe reads none."""
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    with _fake(tmp_path, spec, "--fake-require-key", "sk-1") as srv:
        hosted = HostedServer(srv.base_url, {"Authorization": "Bearer sk-1"})
        m = _measure(hosted)
        wrong = _measure(HostedServer(srv.base_url, {"Authorization": "Bearer nope"}))
    assert m.num_ok == 6 and m.acceptance_rate is None and m.mean_queue_ms is None
    assert m.num_drafts is None
    assert wrong.num_failed == 6 and any("HTTP 401" in e for e in wrong.errors)


def _sglang(tmp_path, *extra, metrics=True):
    spec = {"method": "eagle", "model": "/h", "num_speculative_tokens": 2}
    cfg = EngineConfig(
        model="/fake",
        served_model_name="fake",
        speculative_config=spec,
        device="cuda",
        extra_args=tuple(extra),
    )
    launcher = [sys.executable, str(FAKE_SGLANG)]
    srv = SGLangServer(cfg, tmp_path / "sg.log", cache_root=tmp_path / "c", launcher=launcher)
    if not metrics:  # drop --enable-metrics: SGLang then has no /metrics
        srv._argv = lambda port: [  # type: ignore[method-assign]
            a for a in SGLangServer._argv(srv, port) if a != "--enable-metrics"
        ]
    return srv


def test_sglang_probe_samples_gauges_and_uses_native_endpoints(tmp_path):
    probe = SGLangProbe()
    with _sglang(tmp_path, "--fake-acceptance", "1.0") as srv:
        m = _measure(srv)
        ids = asyncio.run(
            probe.greedy_token_ids(srv.base_url, "fake", [Prompt("a"), Prompt("b")], 5)
        )
        assert asyncio.run(probe.reset_prefix_cache(srv.base_url)) is True  # /flush_cache
    assert m.num_ok == 6
    # every draft accepted: the gauges say length k + 1 and rate 1 (a running average)
    assert m.mean_acceptance_length == pytest.approx(3.0)
    assert m.acceptance_rate == pytest.approx(1.0)
    assert m.num_drafts == 0 and m.per_position_acceptance == []  # not exposed by SGLang
    assert m.mean_queue_ms is None
    assert [len(x) for x in ids] == [5, 5] and ids[0] != ids[1]


def test_sglang_probe_falls_back_to_server_info(tmp_path):
    with _sglang(tmp_path, metrics=False) as srv:
        assert "--enable-metrics" not in srv.argv
        m = _measure(srv)
    assert m.num_failed == 0
    assert m.mean_acceptance_length is not None and m.mean_acceptance_length > 1.0
    assert m.acceptance_rate is None  # /server_info has no rate


CHATS = [
    Prompt("", None, (("system", "Be terse."), ("user", "def f(x):\n")), ("and g?",)),
    Prompt("", 8, (("user", "import os\n"),)),
]


def test_chat_conversations_carry_the_models_own_replies(tmp_path):
    """Chat entries go to /v1/chat/completions; a conversation's second turn carries the
    first turn's reply as the model streamed it; chat's role chunk is no decode step; the
    engine's prompt token counts (template included) are stored with the endpoint."""
    with _fake(tmp_path) as srv:
        raw = _measure(srv, concurrency=1, num_requests=2, warmup_requests=0)
        chat = asyncio.run(
            measure(
                srv.base_url,
                "fake",
                CHATS,
                workload="c",
                concurrency=1,
                num_requests=2,
                max_tokens=20,
                warmup_requests=0,
                timeout_s=10,
                probe=srv.probe,
                chat_extra={"chat_template_kwargs": {"enable_thinking": False}},
            )
        )
        seen = asyncio.run(_get_json(srv.base_url + "/fake/chats"))
    assert raw.endpoint == "completions" and chat.endpoint == "chat"
    # three requests: both turns of the first conversation, then the second's one
    assert chat.num_requests == 3 and chat.num_ok == 3
    assert chat.output_tokens == 20 + 20 + 8 and chat.stream_chunks == 48
    assert seen[0] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "def f(x):\n"},
    ]
    assert seen[1] == [*seen[0], {"role": "assistant", "content": " tok" * 20}] + [
        {"role": "user", "content": "and g?"}
    ]
    assert chat.prompt_tokens_mean > raw.prompt_tokens_mean


async def _get_json(url: str):
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return await r.json()


def test_a_failed_turn_fails_the_rest_of_its_conversation(tmp_path):
    with _fake(tmp_path, None, "--fake-http-error", "500") as srv:
        m = asyncio.run(
            measure(
                srv.base_url,
                "fake",
                CHATS[:1],
                workload="c",
                concurrency=1,
                num_requests=1,
                max_tokens=4,
                warmup_requests=0,
                timeout_s=10,
                probe=srv.probe,
            )
        )
    assert m.num_requests == 2 and m.num_failed == 2
    assert any("an earlier turn of its conversation failed" in e for e in m.errors)


def test_chat_ids_are_the_engines_templated_ones_every_turn(tmp_path):
    """Greedy ids of a chat prompt come from the chat endpoint (the templated prompt's ids,
    as the engine counted them); a conversation gives one sequence a turn, each output the
    depth past its limit, the later turn's prompt carrying the first reply."""
    with _fake(tmp_path) as srv:
        probe = srv.probe
        ids = asyncio.run(probe.greedy_token_ids(srv.base_url, "fake", CHATS, 5))
        seqs = asyncio.run(probe.token_sequences(srv.base_url, "fake", CHATS, [6, 8], 3))
    assert all(i is not None and len(i) == 5 for i in ids)
    first, second = seqs
    assert [len(t) for t in (first, second)] == [2, 1]
    (p1, o1, n1), (p2, o2, n2) = first
    assert (n1, n2, len(o1), len(o2)) == (6, 6, 9, 9)
    template = "[system] Be terse.\n[user] def f(x):\n\n[assistant] "
    assert p1 == [b % 4096 for b in template.encode()]
    assert len(p2) > len(p1) + len(" tok" * 6)
    assert SGLangProbe.chat_path is None  # its chat API answers no ids: checks go without


def test_sampled_sequences_are_draws_of_every_prompt_each_seeded_apart(tmp_path):
    """Under sampling the probe returns ``draws`` draws of each prompt, draw-major, each
    seeded apart and the same again on a second call (a rerun prices the same draws)."""
    prompts = [Prompt("def f(x):"), Prompt("class A:")]
    hot = {"temperature": 0.8}
    with _fake(tmp_path) as srv:

        def get(draws: int) -> list:
            return asyncio.run(
                srv.probe.token_sequences(
                    srv.base_url, "fake", prompts, [6, 6], 2, sampling=hot, draws=draws
                )
            )

        one, four, again = get(1), get(4), get(4)
        greedy = asyncio.run(
            srv.probe.token_sequences(srv.base_url, "fake", prompts, [6, 6], 2, draws=4)
        )
    assert len(one) == 2 and len(four) == 8 and four == again
    assert four[:2] == one  # the first draw is the one a single draw prices
    outs = [turns[0][1] for turns in four]
    assert len({tuple(o) for o in outs}) == 8  # every draw its own sample
    assert [turns[0][0] for turns in four[2:4]] == [turns[0][0] for turns in one]
    assert len(greedy) == 2  # greedy output is one sequence a prompt: nothing to draw
