"""The HPO-benchmark protocol's pieces (bench/hpo): repeat drawing, recommendation scoring,
the analytic random baseline, the exact Wilcoxon test. Fast; no study, no engine."""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import pytest

from bench.hpo._protocol import (
    Observation,
    Oracle,
    Trace,
    Truth,
    analytic_random,
    draw_index,
    launch_factor,
    launch_scaled,
    recommend,
)
from bench.hpo._stats import bootstrap_median_ci, wilcoxon_signed_rank
from tuner.surface import config_key, read_surface

TINY = Path(__file__).resolve().parents[2] / "bench" / "surfaces" / "tiny-cpu.jsonl"


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth(read_surface(TINY))


def test_draw_index_is_seeded_and_covers_every_repeat() -> None:
    draws = [draw_index(7, "cfg", nth, "chat@1", 3) for nth in range(300)]
    assert draws == [draw_index(7, "cfg", nth, "chat@1", 3) for nth in range(300)]
    assert set(draws) == {0, 1, 2}
    assert draws != [draw_index(8, "cfg", nth, "chat@1", 3) for nth in range(300)]


def test_a_relaunch_draws_a_repeat_the_earlier_launches_did_not() -> None:
    """The first n queries of a configuration are a permutation of its n repeats, the first
    drawn as before (by the hash of query 0): two launches never answer the same numbers."""
    import hashlib

    for seed in range(20):
        first = [draw_index(seed, f"c{seed}", nth, "chat@1", 3) for nth in range(3)]
        assert sorted(first) == [0, 1, 2]
        h = hashlib.sha256(f"{seed}|c{seed}|0|chat@1".encode()).digest()
        assert first[0] == int.from_bytes(h[:8], "little") % 3


def test_a_query_returns_one_recorded_repeat_and_asking_again_draws_again(truth: Truth) -> None:
    c = truth.grid[5]
    pt = truth.surface.lookup(c)
    recorded = [r["output_tok_per_s"] for r in pt.measurements[truth.level]["runs"]]
    oracle = Oracle(truth, seed=0)
    seen = [oracle.query(c).value for _ in range(40)]
    assert set(seen) <= set(recorded)
    assert len(set(seen)) == len(set(recorded))  # every repeat shows up, not the median
    assert all(o.launched for o in oracle.log)


def test_a_stated_launch_noise_moves_each_launch_and_not_the_truth(truth: Truth) -> None:
    """``--launch-noise SD``: each launch's speed times exp(N(0, SD)) on top of the repeat it
    draws (this host's relaunches move 6-20 %, its repeats less). Seeded per launch, as the
    draws are; the truth and the success set stay the recorded ones."""
    run = {"output_tok_per_s": 100.0, "p99_tpot_ms": 5.0, "duration_s": 10.0, "num_ok": 12}
    fast = launch_factor(run, 1.25)
    assert fast == {"output_tok_per_s": 125.0, "p99_tpot_ms": 4.0, "duration_s": 8.0, "num_ok": 12}
    assert run["output_tok_per_s"] == 100.0  # a copy: the surface is never changed
    noisy = Truth(read_surface(TINY), launch_noise=0.1)
    c = truth.grid[5]
    recorded = [truth.observe(truth.surface.lookup(c), 0, n)[1] for n in range(40)]
    moved = [noisy.observe(noisy.surface.lookup(c), 0, n)[1] for n in range(40)]
    again = [noisy.observe(noisy.surface.lookup(c), 0, n)[1] for n in range(40)]
    assert moved == again and moved != recorded
    logs = [math.log(m / r) for m, r in zip(moved, recorded, strict=True)]
    sd = math.sqrt(sum(x * x for x in logs) / len(logs))
    assert 0.06 < sd < 0.15, sd
    assert noisy.value == truth.value and noisy.success == truth.success


def test_whole_launches_answer_the_recorded_launch_moved_as_one(truth: Truth) -> None:
    """``--whole-launches``: a launch answers with every recorded repeat and their interval
    (a real launch's three repeats, t = 4.30), all moved by one launch factor; without a
    launch-noise model every relaunch would repeat the same numbers, so it is refused."""
    with pytest.raises(SystemExit, match="launch-noise"):
        Truth(read_surface(TINY), whole_launches=True)
    whole = Truth(read_surface(TINY), launch_noise=0.1, whole_launches=True)
    c = truth.grid[5]
    m = truth.surface.lookup(c).measurements[truth.level]
    kept = copy.deepcopy(m)
    st = m["stats"]["output_tok_per_s"]
    drawn, v, _, _ = whole.observe(whole.surface.lookup(c), 0, 0)
    got = drawn[truth.level]
    f = v / m["output_tok_per_s"]
    assert f != 1.0 and got["stats"]["output_tok_per_s"]["n"] == st["n"] >= 3
    for k in ("median", "mad", "ci95_low", "ci95_high"):
        assert got["stats"]["output_tok_per_s"][k] == pytest.approx(st[k] * f)
    # What the job ranks and tells Optuna (``score``) moves with the launch too.
    assert got["score"]["output_tok_per_s"] == pytest.approx(m["score"]["output_tok_per_s"] * f)
    assert got["score"]["p99_tpot_ms"] == pytest.approx(m["score"]["p99_tpot_ms"] / f)
    tpot = m["stats"]["p99_tpot_ms"]
    assert got["stats"]["p99_tpot_ms"]["ci95_high"] == pytest.approx(tpot["ci95_high"] / f)
    assert [r["output_tok_per_s"] for r in got["runs"]] == pytest.approx(
        [r["output_tok_per_s"] * f for r in m["runs"]]
    )
    again = [whole.observe(whole.surface.lookup(c), 0, n)[1] for n in range(4)]
    assert len(set(again)) == 4 and again[0] == v  # each launch its own factor, seeded
    assert launch_scaled(m, 1.0)["stats"] == m["stats"]
    assert m == kept  # the surface is never changed


def test_truth_is_the_mean_of_the_repeats(truth: Truth) -> None:
    k = truth.best_key
    assert truth.value[k] == pytest.approx(sum(truth.repeats[k]) / len(truth.repeats[k]))
    assert k in truth.success
    assert truth.regret(next(c for c in truth.grid if config_key(c) == k)) == 0.0


def test_the_score_is_the_true_value_of_the_recommendation_not_the_best_observation(
    truth: Truth,
) -> None:
    worst = min(
        (c for c in truth.grid if truth.value[config_key(c)] is not None),
        key=lambda c: truth.value[config_key(c)],
    )
    best = next(c for c in truth.grid if config_key(c) == truth.best_key)
    # A lucky draw of the worst configuration beats an unlucky one of the best: the
    # recommendation is the worst configuration and its regret is its TRUE regret.
    obs = [Observation(best, 1.0, True, True, 1.0), Observation(worst, 1e9, True, True, 1.0)]
    assert recommend(obs, truth.sign) == worst
    t = Trace.of(obs, truth, budget=4)
    assert t.regret[0] == 0.0 and t.regret[1] == truth.regret(worst) > 0.0
    assert t.regret[2:] == [t.regret[1]] * 2  # the last recommendation is kept
    # An infeasible observation is never recommended; a reuse costs no launch.
    obs = [Observation(worst, 1e9, False, True, 1.0), Observation(best, 5.0, True, False, 0.0)]
    t = Trace.of(obs, truth, budget=1)
    assert t.regret == [1.0] and t.launches_to_success() == math.inf


def test_analytic_random_baseline_matches_monte_carlo() -> None:
    N, K = 40, 3
    a = analytic_random(N, K, budget=N, regrets=[0.0] * K + [0.5] * (N - K))
    assert a["expected"] == pytest.approx((N + 1) / (K + 1))
    rng = random.Random(0)
    hits = []
    for _ in range(20000):
        order = rng.sample(range(N), N)
        hits.append(next(i + 1 for i, c in enumerate(order) if c < K))
    assert sum(hits) / len(hits) == pytest.approx(a["expected"], rel=0.03)
    assert sorted(hits)[len(hits) // 2] in (a["median"] - 1, a["median"], a["median"] + 1)
    # P(a success among 10 of 40, K=3) = 1 - C(37,10)/C(40,10) = 0.589 >= 0.5: median regret 0.
    assert sum(h <= 10 for h in hits) / len(hits) == pytest.approx(0.589, abs=0.01)
    assert a["regret_at_10_median"] == 0.0
    # With K=1 it is 10/40 < 0.5: the median regret is the others'.
    assert analytic_random(N, 1, N, [0.0] + [0.5] * (N - 1))["regret_at_10_median"] == 0.5


def test_wilcoxon_exact_against_known_values() -> None:
    # Five positive differences, no ties: W+ = 15 is the most extreme of 2**5 sign patterns.
    assert wilcoxon_signed_rank([2, 3, 4, 5, 6], [1, 1, 1, 1, 1]) == pytest.approx(2 / 32)
    # Ranks 1..6, W+ = 1 + 2 = 3: P(W+ <= 3) = 5/64 -> two-sided 10/64.
    assert wilcoxon_signed_rank([1, 2, -3, -4, -5, -6], [0] * 6) == pytest.approx(10 / 64)
    assert wilcoxon_signed_rank([1, 2, 3], [1, 2, 3]) == 1.0  # all zero differences
    try:
        from scipy import stats
    except ImportError:
        return
    x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
    y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
    assert wilcoxon_signed_rank(x, y) == pytest.approx(stats.wilcoxon(x, y).pvalue)


def test_bootstrap_interval_holds_the_median_and_survives_never_reached() -> None:
    lo, hi = bootstrap_median_ci([3, 4, 5, 6, 7] * 6)
    assert lo <= 5 <= hi
    lo, hi = bootstrap_median_ci([math.inf] * 20 + [3] * 10)
    assert hi == math.inf and not math.isnan(lo)


def test_simulated_surfaces_say_so_and_cite_their_sources() -> None:
    for p in sorted((TINY.parent).glob("sim-*.jsonl")):
        header = json.loads(p.open().readline())
        assert header["simulated"] is True
        assert header["simulation"]["citations"] and header["simulation"]["generator"]
    assert not json.loads(TINY.open().readline()).get("simulated")
