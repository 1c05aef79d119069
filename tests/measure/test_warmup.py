"""Measure to steady state (issue 21, item 5): warm-up windows until two in a row agree, a
cap with a flag, repeats sized by time. The load generator is replaced by a script of
window speeds (labelled fake: no engine runs here)."""

from __future__ import annotations

from typing import Any

import pytest

from tuner.measure import _protocol
from tuner.metrics import Measurement
from tuner.space import loads_space

SPACE = """
name: warm
engine: {kind: vllm, model: target, served_model_name: fake}
methods: {ngram: {num_speculative_tokens: {min: 1, max: 2}}}
concurrency: [1]
workload: {builtin: code_completion, num_prompts: 6, max_tokens: 8, warmup_requests: 2}
measurement: {repeats: 3, max_relative_mad: 10, MEAS}
"""


class _Probe:
    def __init__(self) -> None:
        self.resets = 0

    async def reset_prefix_cache(self, base_url: str) -> bool:
        self.resets += 1
        return True


class _Server:
    base_url = "http://fake"
    headers = None

    def __init__(self) -> None:
        self.probe = _Probe()

    def alive(self) -> bool:
        return True

    def log_tail(self, max_bytes: int = 0) -> str:
        return ""


def _m(tps: float, n: int, *, failed: int = 0) -> Measurement:
    base: dict[str, Any] = dict(
        workload="code_completion",
        concurrency=1,
        num_requests=n,
        num_ok=n - failed,
        num_failed=failed,
        duration_s=n / 4.0,
        output_tokens=8 * n,
        output_tok_per_s=tps,
        requests_per_s=4.0,  # the rate a repeat is sized from
        goodput_req_per_s=4.0,
    )
    for stat in ("mean", "p50", "p90", "p99"):
        for name in ("ttft", "itl", "e2e", "tpot"):
            base[f"{stat}_{name}_ms"] = 10.0
    return Measurement(**base)


passes: list[int] = []  # passes of each window, in order (the scripted fixture fills it)
_passes = passes


@pytest.fixture
def scripted(monkeypatch):
    """Windows answer the scripted tok/s in turn (then the last one); records each size."""
    sent: list[int] = []
    script: list[float] = []
    passes.clear()

    async def fake_measure(
        *args: Any, num_requests: int, passes: int = 1, **kw: Any
    ) -> Measurement:
        sent.append(num_requests)
        _passes.append(passes)
        tps = script[min(len(sent) - 1, len(script) - 1)]
        return _m(tps, num_requests, failed=num_requests if tps == 0 else 0)

    monkeypatch.setattr(_protocol, "measure", fake_measure)
    return sent, script


def _space(meas: str):
    return loads_space(SPACE.replace("MEAS", meas))


def test_windows_go_on_until_two_in_a_row_agree(scripted):
    sent, script = scripted
    # warm-up requests, then windows: 100 (cold), 200, 260, 270 (within 10% of 260): stop.
    script += [50.0, 100.0, 200.0, 260.0, 270.0, 300.0]
    space = _space("warmup: steady, warmup_tolerance: 0.1")
    wl = space.all_workloads[0]
    got = _protocol.measure_point(_Server(), space, wl, [], 1)
    assert got["warmup_windows"] == 4 and got["warmup_capped"] is False
    # 2 warm-up requests, 4 windows of max(4, 2 x 1) requests, then 3 repeats of 6.
    assert sent == [2, 4, 4, 4, 4, 6, 6, 6]


def test_the_cap_is_flagged_and_the_point_is_measured_anyway(scripted):
    sent, script = scripted
    script += [50.0, 100.0, 150.0, 225.0, 340.0, 500.0]  # never settles
    space = _space("warmup: steady, max_warmup_windows: 3")
    got = _protocol.measure_point(_Server(), space, space.all_workloads[0], [], 1)
    assert got["warmup_windows"] == 3 and got["warmup_capped"] is True
    assert sent == [2, 4, 4, 4, 6, 6, 6]


def test_fixed_warmup_sends_only_the_warmup_requests(scripted):
    sent, script = scripted
    script += [100.0]
    space = _space("warmup: fixed")
    got = _protocol.measure_point(_Server(), space, space.all_workloads[0], [], 1)
    assert got["warmup_windows"] == 0 and not got["warmup_capped"]
    assert sent == [2, 6, 6, 6]


def test_a_repeat_is_sized_by_time_in_whole_passes_over_the_same_prompts(scripted):
    sent, script = scripted
    script += [100.0, 100.0, 100.0]
    space = _space("warmup: steady, repeat_s: 5")
    got = _protocol.measure_point(_Server(), space, space.all_workloads[0], [], 1)
    # 4 requests/s x 5 s = 20 requests: round(20 / 6) = 3 passes of the same 6 prompts.
    assert sent[-3:] == [6, 6, 6] and got["passes_per_repeat"] == 3
    assert passes[-3:] == [3, 3, 3]
    assert _protocol.repeat_passes(space, space.all_workloads[0], 1, 0.5) == 1  # at least 1
    assert _protocol.repeat_passes(space, space.all_workloads[0], 1, None) == 1


def test_a_wedged_engine_stops_the_warmup_at_once(scripted):
    sent, script = scripted
    script += [100.0, 0.0]  # every request of the first window fails
    space = _space("warmup: steady")
    with pytest.raises(_protocol.LoadError, match="every request failed in a warm-up window"):
        _protocol.measure_point(_Server(), space, space.all_workloads[0], [], 1)
    assert len(sent) == 2
