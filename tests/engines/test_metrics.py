from __future__ import annotations

import pytest

from tuner.engines import parse_spec_counters
from tuner.metrics import RequestResult, spec_delta, summarize

METRICS = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
# HELP vllm:spec_decode_num_draft_tokens x
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
# HELP vllm:spec_decode_num_accepted_tokens x
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos x
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 80.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 50.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 20.0
"""


def test_parse_counters_sums_engines_and_skips_created():
    two = METRICS + METRICS.replace('engine="0"', 'engine="1"').split("\n", 2)[2]
    c = parse_spec_counters(METRICS)
    assert (c.drafts, c.draft_tokens, c.accepted) == (100, 300, 150)
    assert c.per_pos == (80, 50, 20)
    c2 = parse_spec_counters(two)
    assert c2.drafts == 200


def test_no_spec_counters_means_no_stats():
    c = parse_spec_counters("# HELP x y\n# TYPE x gauge\nx 1\n")
    assert not c.present
    assert spec_delta(c, c) is None


def test_spec_delta_math():
    before = parse_spec_counters(METRICS)
    after = parse_spec_counters(
        METRICS.replace("} 100.0", "} 140.0")
        .replace("} 300.0", "} 420.0")
        .replace("} 150.0", "} 210.0")
        .replace("} 80.0", "} 110.0")
        .replace("} 50.0", "} 70.0")
        .replace("} 20.0", "} 30.0")
    )
    s = spec_delta(before, after)
    assert s.num_drafts == 40 and s.num_draft_tokens == 120 and s.num_accepted_tokens == 60
    assert s.acceptance_rate == pytest.approx(0.5)
    assert s.mean_acceptance_length == pytest.approx(1 + 60 / 40)
    assert s.per_position_acceptance == pytest.approx([30 / 40, 20 / 40, 10 / 40])


def test_spec_delta_refuses_counters_going_backwards():
    a = parse_spec_counters(METRICS)
    b = parse_spec_counters(METRICS.replace("} 100.0", "} 10.0"))
    with pytest.raises(ValueError, match="backwards"):
        spec_delta(a, b)


def _req(ttft, e2e, n, ok=True):
    return RequestResult(
        ok=ok,
        output_tokens=n,
        ttft_s=ttft,
        e2e_s=e2e,
        itl_s=[(e2e - ttft) / max(1, n - 1)] * max(0, n - 1),
    )


def test_summarize_percentiles_throughput_goodput_and_failures():
    results = [_req(0.010 * (i + 1), 0.010 * (i + 1) + 0.099, 100) for i in range(10)]
    results.append(RequestResult(ok=False, error="HTTP 500: boom"))
    m = summarize(results, duration_s=2.0, workload="w", concurrency=4, slo={"p99_ttft_ms": 55.0})
    assert m.num_requests == 11 and m.num_ok == 10 and m.num_failed == 1
    assert m.output_tokens == 1000
    assert m.output_tok_per_s == pytest.approx(500.0)
    assert m.requests_per_s == pytest.approx(5.0)
    # TPOT = 99 ms / 99 tokens = 1 ms for every request
    assert m.p50_tpot_ms == pytest.approx(1.0) and m.p99_tpot_ms == pytest.approx(1.0)
    assert m.p50_ttft_ms == pytest.approx(55.0)
    assert m.p99_ttft_ms == pytest.approx(99.1)
    # 5 of the 10 requests have TTFT <= 55 ms
    assert m.goodput_req_per_s == pytest.approx(2.5)
    assert m.errors == ["HTTP 500: boom"]
    assert m.acceptance_rate is None


def test_summarize_all_failed_has_no_latencies():
    m = summarize(
        [RequestResult(ok=False, error="x")], duration_s=1.0, workload="w", concurrency=1
    )
    assert m.p99_tpot_ms is None and m.output_tok_per_s == 0


def test_single_token_requests_have_no_tpot():
    assert _req(0.01, 0.01, 1).tpot_s is None


def test_a_measured_rate_states_its_error_from_its_own_counters():
    """Var(L) of a round's accepted count follows from the nested per-position rates:
    simulated rounds (independent, the error's own assumption) spread as stated."""
    import random

    from tuner.metrics import SpecStats, acceptance_rate_se

    rng, k, rounds = random.Random(7), 3, 400
    rates = []
    for _ in range(300):
        acc = 0
        for _ in range(rounds):
            a = 0
            while a < k and rng.random() < 0.6:
                a += 1
            acc += a
        rates.append(acc / (rounds * k))
    mean = sum(rates) / len(rates)
    spread = (sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)) ** 0.5
    pp = [0.6, 0.36, 0.216]
    se = acceptance_rate_se(pp, rounds, rounds * k)
    assert se == pytest.approx(spread, rel=0.15)
    assert acceptance_rate_se([], 0, 0) is None and acceptance_rate_se([0.5], 10, 0) is None
    spec = SpecStats(rounds, rounds * k, round(sum(pp) * rounds), None, None, pp)
    m = summarize([], duration_s=1.0, workload="w", concurrency=1, spec=spec)
    assert m.model_dump()["acceptance_rate_se"] == pytest.approx(se)
