"""What is worth a launch (issue 32): the expected gain beyond the margin (the stop rule of
Jones, Schonlau and Welch's EGO), a near tie named rather than launched, a depth bracketed
from one launch priced at its bracket's good end, a same-depth step cost's narrow band, and a
prediction model's measured bias taken out rather than only widened into its band."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.search import Candidate, Outlook
from tuner.search._depth import DepthPoint, predict_depth
from tuner.search._layout import Proposal, calibration
from tuner.search._offline import StepCost
from tuner.search._stop import _with_gain
from tuner.search._strategy import _within
from tuner.stats import expected_gain
from tuner.storage import TrialState

NGRAM = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 3}


def test_expected_gain_is_the_expected_improvement_beyond_the_margin():
    """E[max(0, X - log(1 + margin))] for a normal X, checked against a Monte Carlo draw."""
    assert expected_gain(0.0, 1.0) == pytest.approx(1.0 / math.sqrt(2.0 * math.pi))
    x = np.random.default_rng(0).normal(0.01, 0.06, 400_000)
    want = float(np.maximum(0.0, x - math.log1p(0.03)).mean())
    assert expected_gain(0.01, 0.06, 0.03) == pytest.approx(want, abs=2e-4)
    assert expected_gain(0.1, 0.0, 0.03) == pytest.approx(0.1 - math.log1p(0.03))
    assert expected_gain(-0.1, 0.0) == 0.0
    assert expected_gain(-0.05, 0.1) > expected_gain(-0.05, 0.05) > 0.0


def test_a_near_tie_expects_too_little_and_a_contender_enough():
    """Against a winner at 100: a candidate predicted 99 (band to 105) expects far below 1 %
    beyond +3 %; one predicted 110 (band to 130) expects more than 1 %."""
    near = _with_gain(Candidate(NGRAM, 99.0, 105.0, "offline"), 100.0, 0.03, True)
    good = _with_gain(Candidate(NGRAM, 110.0, 130.0, "offline"), 100.0, 0.03, True)
    assert near.gain is not None and near.gain < 0.01 < float(good.gain or 0.0)
    # a latency to minimize: lower is the gain
    low = _with_gain(Candidate(NGRAM, 9.0, 8.0, "offline"), 10.0, 0.03, False)
    assert float(low.gain or 0.0) > 0.05


def test_a_noisy_winner_does_not_make_every_candidate_worth_a_launch():
    """The gain is over the winner's value, its own uncertainty left to the confirmation
    (Huang et al.'s incumbent is a known value): the outlook of a candidate predicted 99
    (band to 105) against a winner launched once at 100 expects as little whether the
    winner's repeats are tight or wide (``outlook`` passes only the winner's value). It was
    added in quadrature: the noisier the winner, the more every candidate expected, though a
    launch of the candidate cannot tell where in its interval the winner lies."""
    near = _with_gain(Candidate(NGRAM, 99.0, 105.0, "offline"), 100.0, 0.03, True)
    band_sd = math.log1p(105.0 / 99.0 - 1.0) / 1.96  # the candidate's band only
    assert near.gain == pytest.approx(expected_gain(math.log(0.99), band_sd, 0.03))
    # with a wide winner's interval (5 %) in quadrature it expected 6.6 times as much
    assert expected_gain(math.log(0.99), math.hypot(band_sd, 0.05), 0.03) > 2 * near.gain


def test_near_ties_are_named_in_the_reason_and_do_not_keep_the_search_open():
    c = Candidate({**NGRAM, "num_speculative_tokens": 3}, 99.0, 105.0, "offline", gain=0.004)
    look = Outlook(
        "output_tok_per_s",
        True,
        3,
        100.0,
        "2 launches, between-launch spread",
        5,
        (),
        (),
        105.0,
        near=(c,),
        min_gain=0.01,
    )
    assert not look.can_win
    assert look.reason() == (
        "nothing left can win: 5 configurations priced; 1 near ties reach the winner's lower "
        "bound 100 (trial 3, 2 launches, between-launch spread) but expect at most 0.4 % "
        "beyond it (method=ngram num_speculative_tokens=3 prompt_lookup_min=2 "
        "prompt_lookup_max=3 predicted 99), below the 1 % worth a launch; the rest cannot "
        "reach it"
    )


def _look(*hopeful: Candidate, unknown: tuple[Candidate, ...] = ()) -> Outlook:
    return Outlook("output_tok_per_s", True, 3, 100.0, "one launch", 5, hopeful, unknown, 130.0)


def test_the_next_launch_is_the_largest_expected_gain_not_the_best_centre():
    """EGO's acquisition is the expected improvement its stop rule reads: a near tie
    predicted 104 with a narrow band (to 106) expects less beyond +3 % than a rival predicted
    101 whose band reaches 125, so the rival is launched, though the guide ranks the near tie
    first on its centre (the linear and tiny surfaces' whole jobs: 10 and 7 launches by
    centre, 9 and 6 by gain). Without a priced gain, the best optimism leads as before."""
    tie = {**NGRAM, "num_speculative_tokens": 2}
    rival = {**NGRAM, "num_speculative_tokens": 6}
    c_tie = _with_gain(Candidate(tie, 104.0, 106.0, "offline"), 100.0, 0.03, True)
    c_rival = _with_gain(Candidate(rival, 101.0, 125.0, "offline"), 100.0, 0.03, True)
    assert float(c_rival.gain or 0) > float(c_tie.gain or 0) >= 0.0
    look = _look(c_tie, c_rival)
    assert look.best == c_rival
    guide = Proposal(tie, "guide: depth", "the best unlaunched depth")
    got = _within(guide, look)
    assert got is not None and got.params == rival and got.by == "guide: can win"
    assert "expected gain" in got.why
    # the guide's pick stands when it is the best by gain, or a launch nothing can price
    assert _within(Proposal(rival, "guide: depth", "x"), look) == Proposal(
        rival, "guide: depth", "x"
    )
    scan = Candidate({"method": "eagle", "num_speculative_tokens": 4}, None, None, "no prediction")
    look2 = _look(c_tie, c_rival, unknown=(scan,))
    scan_prop = Proposal(dict(scan.params), "guide: scan", "never launched")
    assert _within(scan_prop, look2) == scan_prop
    # without gains (no winner priced): the best optimism
    plain = _look(Candidate(tie, 104.0, 106.0, "offline"), Candidate(rival, 101.0, 125.0, "o"))
    assert plain.best is not None and plain.best.params == rival


def _depth(trial: int, k: int, step: float, tok_s: float) -> DepthPoint:
    acc = [0.8, 0.6, 0.4, 0.3, 0.2][:k]
    m = {"mean_itl_ms": step, "output_tok_per_s": tok_s, "per_position_acceptance": acc}
    return DepthPoint(trial, k, {**m, "ttft_ms": 10.0, "e2e_ms": 1000.0})


def test_a_depth_bracketed_from_one_launch_is_priced_at_the_brackets_good_end():
    """One launched depth (k=3) brackets a step's cost between all per drafted token and
    all fixed: k=2 is predicted in the middle, and the truth may sit at either end. An
    unknown is not noise: its expected gain is taken at the good end, so a neighbour whose
    middle is 4 % short of the winner but whose good end beats it is launched (the simulated linear
    surface's best, MTP k=2 beside a launched k=3, was missed 37 % of the time when the
    bracket was read as a normal band). Two launched depths fit the line: no bracket."""
    base, k3 = _depth(0, 0, 10.0, 100.0), _depth(1, 3, 16.0, 140.0)
    one = predict_depth(2, [k3], base, "output_tok_per_s")
    assert one is not None and 0.05 < one.bracket <= one.rel_sigma
    v = one.metrics["output_tok_per_s"]
    hi = v * (1 + one.rel_sigma)
    w = 1.04 * v  # the winner, 4 % above the middle, inside the good end
    assert w < v * (1 + one.bracket)
    as_band = _with_gain(Candidate(NGRAM, v, hi, "depth model"), w, 0.03, True)
    bracketed = _with_gain(
        Candidate(NGRAM, v, hi, "depth model", bracket=one.bracket), w, 0.03, True
    )
    assert bracketed.gain is not None and as_band.gain is not None
    assert bracketed.gain >= 0.01 > as_band.gain
    both = predict_depth(2, [k3, _depth(2, 5, 20.0, 150.0)], base, "output_tok_per_s")
    assert both is not None and both.bracket == 0.0


def test_a_step_cost_split_at_one_depth_is_measured_there():
    """At the launched depth the step is measured (5 %), the split's band grows with the
    distance from it up to the whole split's (25 %); without an anchor, the model's own."""
    cost = StepCost(0.1, 0.02, 0.25, "its method's one launched depth (4), split", anchor=4)
    assert cost.band(4) == pytest.approx(0.05)
    assert cost.band(2) == pytest.approx(0.15)
    assert cost.band(8) == cost.band(12) == pytest.approx(0.25)
    assert StepCost(0.0, 0.05, 0.5, "prior").band(3) == pytest.approx(0.5)


class _Row:
    def __init__(self, n: int, method: str, predicted: float, measured: float) -> None:
        self.number, self.state = n, TrialState.COMPLETE
        self.params = {"method": method}
        self.search = {"predicted": {"value": predicted, "notes": ["step cost: split"]}}
        self.measurements = [
            type("M", (), {"workload": "w", "concurrency": 1, "metrics": {"x": measured}})()
        ]


def test_a_models_steady_bias_is_taken_out_and_its_band_is_the_scatter_around_it():
    """Three n-gram predictions 10 % high: the bias log(100/110), shrunk as a normal prior
    of sd 0.25 on it and launch noise of sd 0.10 say (0.0625 / (0.0625 + 0.01 / 3)),
    corrects the next one; the band is what is left around it. One error shrinks more than
    three, never by half (a steady miss is the model's, not noise). A draft model's errors
    stay apart."""
    rows = [_Row(i, "ngram", 110.0, 100.0) for i in range(3)] + [_Row(9, "draft_model", 50, 100)]
    cal = calibration(rows, "x", ("w", 1), "offline", "ngram", correct=True)
    shrink = 0.0625 / (0.0625 + 0.01 / 3)
    assert cal.n == 3
    assert cal.bias == pytest.approx(math.log(100 / 110) * shrink)
    assert cal.correct(110.0) == pytest.approx(110.0 * (100 / 110) ** shrink)
    assert cal.median == pytest.approx(abs(math.expm1(math.log(100 / 110) * (1 - shrink))))
    one = calibration(rows[:1], "x", ("w", 1), "offline", "ngram", correct=True)
    assert cal.bias < one.bias < 0.8 * cal.bias < 0  # 0.86 of the error, where 3 take 0.95
    assert one.bias < 0.8 * math.log(100 / 110)  # not shrunk by half, as n / (n + 1) did
    plain = calibration(rows, "x", ("w", 1), "offline", "ngram")
    assert plain.bias == 0.0 and plain.median == pytest.approx(10 / 110)
    assert calibration(rows, "x", ("w", 1), "offline", "eagle").n == 0


def test_a_launch_that_cannot_tell_a_narrow_prediction_from_the_winner_is_worth_less():
    """Launches are noisy: one of a candidate predicted as precisely as a launch measures
    would most likely read a tie. Its expected gain is discounted as Huang et al.'s
    augmented expected improvement (2006) says, by 1 - noise / sqrt(band^2 + noise^2): a
    candidate predicted 4 % above a winner at 100, band to 110, expects 1.7 % beyond +3 %
    with exact launches and about 0.1 % when a launch moves by 8 %. A wide band is discounted
    less; a bracket wider than the noise not at all: one launch of the proposer settles its
    split at every depth."""
    narrow = Candidate(NGRAM, 104.0, 110.0, "offline")
    exact = _with_gain(narrow, 100.0, 0.03, True)
    noisy = _with_gain(narrow, 100.0, 0.03, True, noise=0.08)
    assert exact.gain is not None and noisy.gain is not None
    assert exact.gain >= 0.01 > 0.002 > noisy.gain
    own = math.log(110.0 / 104.0) / 1.96  # the band: to 110, 5.8 % above the middle
    assert noisy.gain == pytest.approx(exact.gain * (1 - 0.08 / math.hypot(own, 0.08)))
    wide = Candidate(NGRAM, 104.0, 150.0, "offline")
    kept = float(_with_gain(wide, 100.0, 0.03, True, noise=0.08).gain or 0.0)
    assert kept / float(_with_gain(wide, 100.0, 0.03, True).gain or 1.0) > 0.3
    br = Candidate(NGRAM, 104.0, 120.0, "depth model", bracket=0.10)
    assert _with_gain(br, 100.0, 0.03, True, noise=0.08).gain == pytest.approx(
        float(_with_gain(br, 100.0, 0.03, True).gain)
    )


def test_a_bracket_narrower_than_a_launchs_noise_is_discounted_as_a_band():
    """A depth next to the launched one (k=7 beside k=8) is bracketed by a few % of split,
    less than a relaunch moves by itself (this 2-core host: 6-20 %). One launch of it cannot
    say where in the bracket it lies; a lucky draw would only take the lead and be confirmed
    (the demo's suffix k=7 after k=8). So it is discounted as a band is; a bracket wider
    than the noise is not, and without noise nothing is."""
    br = Candidate(NGRAM, 104.0, 110.0, "depth model", bracket=0.04)
    exact = float(_with_gain(br, 100.0, 0.03, True).gain or 0.0)
    noisy = float(_with_gain(br, 100.0, 0.03, True, noise=0.08).gain or 0.0)
    own = math.log(110.0 / 104.0) / 1.96
    assert exact >= 0.01 > noisy
    assert noisy == pytest.approx(exact * (1 - 0.08 / math.hypot(own, 0.08)))
    calm = float(_with_gain(br, 100.0, 0.03, True, noise=0.03).gain or 0.0)
    assert calm == pytest.approx(exact)  # 4 % of bracket: wider than a 3 % launch noise
