"""The distribution check of lossless-under-sampling (tuner.measure._distribution): its
false-alarm rate on two sets from one distribution, its power on a skewed one, and what it
leaves out. Simulated samples only; tests/engines/test_sampling_vllm.py runs it on vLLM."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.measure import distribution_p_value
from tuner.measure._distribution import sample_seed

FAIR = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.05])
SKEWED = np.array([0.55, 0.2, 0.1, 0.07, 0.04, 0.04])  # a sampler favouring the draft's pick


def _draw(rng, p, prompts=4, n=48, length=16):
    return [[list(rng.choice(len(p), size=length, p=p)) for _ in range(n)] for _ in range(prompts)]


def test_false_alarms_stay_at_alpha_when_both_sets_come_from_one_distribution():
    """A permutation test is exact: over 300 checks of two sets from one distribution, the
    share flagged at alpha = 0.05 stays within binomial noise of 5% (15 expected; more than
    27 is beyond 3 standard deviations)."""
    rng = np.random.default_rng(7)
    ps = [
        distribution_p_value(_draw(rng, FAIR), _draw(rng, FAIR), permutations=99, seed=i)
        for i in range(300)
    ]
    flagged = sum(p <= 0.05 for p in ps)
    assert 3 <= flagged <= 27, flagged
    assert all(0 < p <= 1 for p in ps)


def test_a_skewed_sampler_is_flagged():
    rng = np.random.default_rng(11)
    ps = [distribution_p_value(_draw(rng, FAIR), _draw(rng, SKEWED), seed=i) for i in range(20)]
    assert sum(p < 0.01 for p in ps) >= 16  # power >= 80% at these sizes


def test_the_same_inputs_give_the_same_p_value():
    rng = np.random.default_rng(3)
    a, b = _draw(rng, FAIR), _draw(rng, SKEWED)
    assert distribution_p_value(a, b, seed=5) == distribution_p_value(a, b, seed=5)


def test_failed_prompts_and_short_sets_are_left_out_and_nothing_comparable_is_none():
    rng = np.random.default_rng(1)
    a, b = _draw(rng, FAIR, prompts=2), _draw(rng, FAIR, prompts=2)
    assert distribution_p_value([None, a[1]], [b[0], None]) is None
    assert distribution_p_value([[[1, 2]]], [[[1, 2]], [[3]]]) is None  # one sample a side
    assert distribution_p_value([], []) is None
    # continuations of unequal length are compared over the positions all of them reached
    short = [[s[:5] for s in seqs] for seqs in b]
    p = distribution_p_value(a, short, permutations=99)
    assert p is not None and 0 < p <= 1


def test_identical_sets_are_never_flagged():
    rng = np.random.default_rng(2)
    a = _draw(rng, FAIR)
    assert distribution_p_value(a, a, permutations=199) == pytest.approx(1.0)


def test_baseline_and_candidate_never_share_a_seed():
    n, prompts = 1000, 64  # the largest the space allows
    base = {sample_seed(i, n, baseline=True) + j for i in range(prompts) for j in range(n)}
    cand = {sample_seed(i, n, baseline=False) + j for i in range(prompts) for j in range(n)}
    assert len(base) == len(cand) == n * prompts and not base & cand
