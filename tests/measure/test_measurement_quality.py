"""Repeats and noise, the round-cost verdict, the lossless guard, memory parsing."""

from __future__ import annotations

import pytest

from tests.helpers import histogram_text
from tuner.engines import parse_kv_cache_tokens as kv_cache_tokens
from tuner.engines import parse_queue_time
from tuner.measure import lossless_match
from tuner.metrics import Measurement, histogram_mean_ms
from tuner.pareto import Verdict, crossover_concurrency, feasible, verdicts
from tuner.space import SpaceError, loads_space
from tuner.stats import aggregate, noise_score, relative_mad, summary
from tuner.workloads import BUILTIN_FORMATS, builtin_path, load_prompts


def _m(tok: float, tpot: float, **kw) -> Measurement:
    base = dict(
        workload="w",
        concurrency=4,
        num_requests=10,
        num_ok=10,
        num_failed=0,
        duration_s=1.0,
        output_tokens=int(tok),
        output_tok_per_s=tok,
        requests_per_s=10.0,
        goodput_req_per_s=10.0,
    )
    for stat in ("mean", "p50", "p90", "p99"):
        for name in ("ttft", "itl", "e2e"):
            base[f"{stat}_{name}_ms"] = 10.0
        base[f"{stat}_tpot_ms"] = tpot
    base.update(kw)
    return Measurement(**base)


def test_summary_median_mad_and_t_interval():
    st = summary([100.0, 110.0, 90.0])
    assert st["median"] == 100.0 and st["mad"] == 10.0 and st["n"] == 3
    # mean 100, sd 10, t(0.975, 2) = 4.303 -> half width 4.303 * 10 / sqrt(3)
    assert st["ci95_low"] == pytest.approx(100 - 24.84, abs=0.01)
    assert st["ci95_high"] == pytest.approx(100 + 24.84, abs=0.01)
    assert relative_mad(st) == pytest.approx(0.14826)
    assert noise_score(st, "maximize") == pytest.approx(100 - 14.826)
    assert noise_score(st, "minimize") == pytest.approx(100 + 14.826)
    one = summary([5.0])
    assert one["ci95_low"] == one["ci95_high"] == 5.0


def test_aggregate_takes_medians_and_sums_counts():
    runs = [_m(100, 5.0), _m(120, 4.0, num_failed=1, errors=["HTTP 500: x"]), _m(90, 6.0)]
    agg = aggregate(runs)
    assert agg["output_tok_per_s"] == 100.0 and agg["p99_tpot_ms"] == 5.0
    assert agg["num_requests"] == 30 and agg["num_failed"] == 1
    assert agg["repeats"] == 3 and agg["errors"] == ["HTTP 500: x"]
    assert agg["stats"]["output_tok_per_s"]["mad"] == 10.0
    assert [r["output_tok_per_s"] for r in agg["runs"]] == [100, 120, 90]


def _pt(ms_per_token: float, tpot: float = 1.0) -> dict:
    """A stored point: 4 requests of 16 tokens; TPOT deliberately unrelated (bursty streams
    move decode time into TTFT, so the verdict must not read it)."""
    return {
        "mean_e2e_ms": 16 * ms_per_token,
        "output_tokens": 64,
        "num_ok": 4,
        "mean_tpot_ms": tpot,
    }


def test_verdict_and_crossover():
    base = {1: _pt(10.0), 4: _pt(12.0), 8: _pt(14.0)}
    spec = {1: _pt(8.0, tpot=50.0), 4: _pt(12.5, tpot=0.1), 8: _pt(20.0)}
    vs = verdicts(spec, base)
    assert [v.pays_off for v in vs] == [True, False, False]
    assert vs[0].margin_pct == pytest.approx(25.0)
    assert vs[0].text() == "pays off by 25.0%"
    assert crossover_concurrency(vs) == 4
    # pays everywhere: no crossover; pays only at high load is not a "stops paying" point
    assert crossover_concurrency([Verdict(1, 9, 10), Verdict(4, 9, 10)]) is None
    assert crossover_concurrency([Verdict(1, 11, 10), Verdict(4, 9, 10)]) is None
    assert crossover_concurrency([Verdict(1, 11, 10), Verdict(4, 12, 10)]) == 1
    # Intervals: overlapping ones tie; a tie is not "pays" for the crossover either.
    tied = Verdict(1, 9.0, 10.0, (8.0, 10.5), (9.5, 10.5))
    assert tied.state == "tied" and not tied.pays_off
    assert tied.speedup_ci95 == pytest.approx((9.5 / 10.5, 10.5 / 8.0))
    assert crossover_concurrency([Verdict(1, 9, 10), tied]) == 1
    assert Verdict(1, 9.0, 10.0, (8.8, 9.2), (9.8, 10.2)).state == "pays"
    assert Verdict(1, 11.0, 10.0, (10.8, 11.2), (9.8, 10.2)).state == "does not pay"


def test_feasibility_flags_noise_and_lossless():
    ok, why = feasible({"num_failed": 0, "noisy": True, "relative_mad": 0.3}, {})
    assert not ok and why == ("noisy: relative MAD 30%",)
    ok, why = feasible({"num_failed": 0}, {}, lossless_match_rate=0.5, min_match_rate=0.9)
    assert not ok and why == ("greedy match 50% < 90%",)
    assert feasible({"num_failed": 0}, {}, lossless_match_rate=0.95, min_match_rate=0.9)[0]


def test_lossless_match_counts_common_prefix_tokens():
    ref = [[1, 2, 3, 4], [5, 6, 7, 8], None]
    assert lossless_match(ref, [[1, 2, 3, 4], [5, 6, 7, 8], [1]]) == 1.0
    # second prompt diverges after 2 tokens: later tokens cannot be compared
    assert lossless_match(ref, [[1, 2, 3, 4], [5, 6, 9, 8], [1]]) == pytest.approx(6 / 8)
    assert lossless_match(ref, [None, None, None]) is None


def test_kv_cache_tokens_from_engine_log():
    log = "x\n(EngineCore pid=1) INFO [kv_cache_utils.py:2327] CPU KV cache size: 18,432 tokens"
    assert kv_cache_tokens(log) == 18432
    assert kv_cache_tokens("GPU KV cache size: 1,234,567 tokens") == 1234567
    assert kv_cache_tokens("nothing") is None


def test_queue_time_from_histogram_deltas():
    def text(total: float, count: int) -> str:
        return histogram_text("request_queue_time_seconds", total, count)

    before, after = parse_queue_time(text(1.0, 10)), parse_queue_time(text(1.5, 20))
    assert histogram_mean_ms(before, after) == pytest.approx(50.0)
    assert parse_queue_time("") is None and histogram_mean_ms(None, after) is None


@pytest.mark.parametrize("name", sorted(BUILTIN_FORMATS))
def test_builtin_workloads_ship(name):
    prompts = load_prompts(builtin_path(name), BUILTIN_FORMATS[name])
    assert len(prompts) >= 20 and all(p.prompt or p.messages for p in prompts)
    assert all(p.chat for p in prompts) == (BUILTIN_FORMATS[name] == "chat")


def test_arrival_and_workload_validation():
    base = "name: t\nengine: {model: m}\nmethods: {ngram: {}}\n"
    s = loads_space(base + "workload: {arrival: poisson, request_rate: 2.5}\n")
    assert s.workload.request_rate == 2.5
    with pytest.raises(SpaceError, match="arrival poisson needs request_rate"):
        loads_space(base + "workload: {arrival: poisson}\n")
    with pytest.raises(SpaceError, match="workloads: names must differ"):
        loads_space(base + "workloads: [{builtin: chat}, {builtin: chat}]\n")
    s = loads_space(base + "workloads: [{builtin: chat}, {builtin: summarization}]\n")
    assert s.primary_workload == "chat" and len(s.all_workloads) == 2


def test_interval_is_clipped_at_zero_and_histograms_join_repeats():
    st = summary([1.0, 9.0])  # t(0.975, 1) = 12.7: the raw lower end is far below zero
    assert st["ci95_low"] == 0.0 and st["ci95_high"] > 9.0
    runs = [_m(100, 5.0, tpot_ms_values=[1.0, 2.0]), _m(110, 5.0, tpot_ms_values=[3.0])]
    assert aggregate(runs)["tpot_ms_values"] == [1.0, 2.0, 3.0]
