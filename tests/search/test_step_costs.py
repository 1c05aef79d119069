"""The step-cost model of a proposer not launched yet (``tuner.search._offline``): a model
proposer's own share is its size scaled by what launched model proposers cost over their
size, and the job's calibration counts only errors of the model that is predicting."""

from __future__ import annotations

import math

import pytest

from tests.search.chain_surface import ACCEPT, SPACE, trial_row
from tuner.offline import OfflinePrices
from tuner.offline._rounds import OfflineAcceptance
from tuner.search import DepthPoint, step_costs
from tuner.search._depth import Calibration, line_fit
from tuner.search._layout import (
    Layout,
    calibration,
    family_key,
    own_noise,
    prediction_source,
    shrink,
)
from tuner.search._offline import _residual_bias, offline_predictions
from tuner.space import loads_space
from tuner.storage import TrialState

NGRAM = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
DRAFT = {"method": "draft_model", "draft": "draft-a"}
HEAD = {"method": "eagle", "head": "head"}


def _pt(trial: int, k: int, step: float) -> DepthPoint:
    return DepthPoint(trial, k, {"mean_itl_ms": step, "output_tok_per_s": 100.0})


@pytest.fixture
def space(tmp_path):
    return loads_space(SPACE, base_dir=tmp_path)


def _sizes(**share: float) -> dict[str, float]:
    return {family_key(p): v for p, v in ((DRAFT, share["draft"]), (HEAD, share["head"]))}


def test_a_launched_draft_scales_an_unlaunched_heads_share_by_size(space):
    """Baseline step 10 ms; n-gram at k=4 costs 12 ms (verify 0.05 a token); the draft
    (size share 0.1) at k=4 costs 18 ms: 0.2 a token, 0.15 of it its own, 1.5x its size.
    The head (size share 0.02) is then priced at 0.05 + 0.02 x 1.5 a token, not 0.07."""
    sizes = _sizes(draft=0.1, head=0.02)
    launched = [({**NGRAM}, _pt(1, 4, 12.0)), ({**DRAFT}, _pt(2, 4, 18.0))]
    cost = step_costs(space, launched, _pt(0, 0, 10.0), {**HEAD}, sizes)
    assert cost.per_token == pytest.approx(0.05 + 0.02 * 1.5)
    assert cost.fixed == 0.0
    assert cost.rel_sigma == pytest.approx(0.3)  # verify band + one other proposer's
    assert "scaled by parameters from 1 launched model proposer (x1.50" in cost.how


def test_without_a_launched_model_the_size_share_is_used_as_is(space):
    sizes = _sizes(draft=0.1, head=0.02)
    cost = step_costs(space, [({**NGRAM}, _pt(1, 4, 12.0))], _pt(0, 0, 10.0), {**HEAD}, sizes)
    assert cost.per_token == pytest.approx(0.05 + 0.02)
    assert cost.how == "verify cost from other methods' launches"
    assert cost.rel_sigma == pytest.approx(0.2)


def test_a_lookup_borrows_a_models_cost_split_at_its_depth(space):
    """Baseline step 10 ms; a draft (size share 0.1) at k=4 costs 18 ms: 0.2 a token, of
    which 0.1 is the verify bound (that launch's fixed part is in it). An n-gram lookup is
    priced in the middle of what that bound allows: 0.2 fixed and 0.05 a token, so at the
    draft's depth it costs the bound's 0.4 and deeper it costs less than the bound says
    (at 8: 0.6, not 0.8)."""
    sizes = _sizes(draft=0.1, head=0.02)
    cost = step_costs(space, [({**DRAFT}, _pt(2, 4, 18.0))], _pt(0, 0, 10.0), {**NGRAM}, sizes)
    assert cost.how == "verify cost from other methods' launches, split"
    assert cost.fixed == pytest.approx(0.2) and cost.per_token == pytest.approx(0.05)
    assert cost.fixed + 4 * cost.per_token == pytest.approx(0.1 * 4)
    assert cost.fixed + 8 * cost.per_token == pytest.approx(0.6)
    assert cost.rel_sigma == pytest.approx(0.2)
    # A model proposer takes the bound as its verify part, all of it per token.
    head = step_costs(space, [({**DRAFT}, _pt(2, 4, 18.0))], _pt(0, 0, 10.0), {**HEAD}, sizes)
    assert head.fixed == 0.0


def test_several_launched_models_widen_the_band_by_their_spread(space):
    """Two launched model proposers disagreeing (1.5x and 3x their size): the median
    multiplier, and a band holding their spread in log space."""
    other = {"method": "draft_model", "draft": "draft-b"}
    sizes = {**_sizes(draft=0.1, head=0.02), family_key(other): 0.05}
    launched = [
        ({**NGRAM}, _pt(1, 4, 12.0)),
        ({**DRAFT}, _pt(2, 4, 18.0)),  # (0.2 - 0.05) / 0.1 = 1.5
        ({**other}, _pt(3, 2, 14.0)),  # (0.2 - 0.05) / 0.05 = 3.0
    ]
    cost = step_costs(space, launched, _pt(0, 0, 10.0), {**HEAD}, sizes)
    mult = math.exp((math.log(1.5) + math.log(3.0)) / 2)
    assert cost.per_token == pytest.approx(0.05 + 0.02 * mult)
    sd = abs(math.log(3.0) - math.log(1.5)) / math.sqrt(2)
    assert cost.rel_sigma == pytest.approx(0.2 + sd)


def test_an_n_gram_lookup_has_no_share_to_scale(space):
    sizes = _sizes(draft=0.1, head=0.02)
    launched = [({**NGRAM}, _pt(1, 4, 12.0)), ({**DRAFT}, _pt(2, 4, 18.0))]
    other = {**NGRAM, "prompt_lookup_min": 2}
    cost = step_costs(space, launched[1:], _pt(0, 0, 10.0), other, sizes)
    assert "scaled" not in cost.how


def test_a_line_over_launched_depths_is_as_sure_between_them_as_one_launched_depth(space):
    """Lookups launched at k=4 and k=6: between them the fitted line interpolates measured
    steps, so its band there is the one-launched-depth band (not the line's wider one),
    widening only away from them. Two launches must not price worse than one."""
    one = step_costs(space, [({**NGRAM}, _pt(1, 6, 13.0))], _pt(0, 0, 10.0), {**NGRAM})
    launched = [({**NGRAM}, _pt(1, 4, 12.0)), ({**NGRAM, "prompt_lookup_min": 2}, _pt(2, 6, 13.0))]
    two = step_costs(space, launched, _pt(0, 0, 10.0), {**NGRAM})
    assert two.how == "learned from its method's depths"
    assert two.band(6) == pytest.approx(one.band(6)) == pytest.approx(0.05)
    assert two.band(5) == pytest.approx(0.05)
    assert 0.05 < two.band(8) < two.band(12) == pytest.approx(two.rel_sigma)
    assert two.band(2) > 0.05
    # a line that misses its own launches is as unsure as it misses them
    noisy = [*launched, ({**NGRAM}, _pt(3, 5, 14.5))]
    assert step_costs(space, noisy, _pt(0, 0, 10.0), {**NGRAM}).band(5) > 0.05


def test_a_line_tilted_below_zero_is_refitted_not_clipped(space):
    """Launch noise over a narrow span of depths can tilt the free line to a negative fixed
    part (here -0.6 + 0.2 k). Clipping the fixed part to zero and keeping the slope priced
    each launched depth 40-50 % slower than it ran; the fit with the fixed part held at zero
    passes within 15 % of both, and a line falling with depth is held flat instead."""
    base = _pt(0, 0, 10.0)
    tilted = [({**NGRAM}, _pt(1, 4, 12.0)), ({**NGRAM, "prompt_lookup_min": 2}, _pt(2, 6, 16.0))]
    cost = step_costs(space, tilted, base, {**NGRAM})
    assert cost.how == "learned from its method's depths" and cost.fixed == 0.0
    for k, step in ((4, 12.0), (6, 16.0)):
        assert abs(10.0 * (1 + cost.per_token * k) - step) / step < 0.15
    falling = [({**NGRAM}, _pt(1, 4, 14.0)), ({**NGRAM, "prompt_lookup_min": 2}, _pt(2, 6, 12.0))]
    flat = step_costs(space, falling, base, {**NGRAM})
    assert flat.per_token == 0.0 and flat.fixed == pytest.approx(0.3)


def test_a_step_line_never_falls_with_depth_nor_below_the_baseline():
    """``line_fit``: a line the bounds allow is the free least-squares line; one that falls
    with depth is held flat; one below the baseline's step at no depth is refitted through
    it (both by least squares, not by clipping one coefficient)."""
    assert line_fit([(1, 11.0), (3, 13.0)], 10.0) == pytest.approx((10.0, 1.0))
    assert line_fit([(2, 14.0), (4, 12.0)], 10.0) == pytest.approx((13.0, 0.0))
    assert line_fit([(2, 14.0), (4, 12.0)]) == pytest.approx((13.0, 0.0))
    assert line_fit([(4, 12.0), (6, 16.0)], 10.0) == pytest.approx((10.0, 44 / 52))
    assert line_fit([(4, 12.0), (4, 16.0)], 10.0) is None


def _rounds(trial: int, k: int, e2e_ms: float, drafted: float) -> DepthPoint:
    """Ten requests of 101 tokens, no prefill time; a speculative one accepts 50 tokens in
    50 rounds, every round drafting ``drafted`` tokens."""
    m = {"mean_e2e_ms": e2e_ms, "mean_prefill_ms": 0.0, "mean_ttft_ms": 0.0}
    m |= {"num_ok": 10, "output_tokens": 1010, "output_tok_per_s": 100.0}
    if k:
        m |= {"num_accepted_tokens": 500, "num_drafts": 500, "num_draft_tokens": 500 * drafted}
    return DepthPoint(trial, k, m)


def test_two_depths_drafting_alike_price_their_mean_cost_fixed(space):
    """Two depths whose rounds draft the same tokens (an engine that drafts fewer than its
    depth) cannot split a step's cost; it is their mean extra cost, all fixed, not zero
    (which priced every depth at the baseline's step)."""
    launched = [
        ({**NGRAM}, _rounds(1, 3, 600.0, 2.0)),  # 12 ms a round over the baseline's 10
        ({**NGRAM, "prompt_lookup_min": 2}, _rounds(2, 5, 700.0, 2.0)),  # 14 ms
    ]
    cost = step_costs(space, launched, _rounds(0, 0, 1000.0, 0.0), {**NGRAM})
    assert cost.how == "learned from its method's depths"
    assert cost.fixed == pytest.approx(0.3) and cost.per_token == 0.0


def test_one_launched_depth_is_as_unsure_elsewhere_as_its_split_can_move_the_step(space):
    """A lookup at k=2 costing 10 % over the baseline's step can cost, at k=4, between 10 %
    (all fixed) and 20 % (all per drafted token): the middle, 15 %, is off by at most 5 of
    its 115, so its band there is 5 % + 4.3 %, not the split's a-priori 25 %. One costing
    72 % over it can move k=4's step by far more: capped at 25 %."""
    cheap = step_costs(space, [({**NGRAM}, _pt(1, 2, 11.0))], _pt(0, 0, 10.0), {**NGRAM})
    assert cheap.band(2) == pytest.approx(0.05)
    assert cheap.band(4) == pytest.approx(0.05 + 0.05 / 1.15)
    assert cheap.band(1) == pytest.approx(0.05 + 0.025 / 1.075)
    dear = step_costs(space, [({**NGRAM}, _pt(1, 2, 17.2))], _pt(0, 0, 10.0), {**NGRAM})
    assert cheap.band(4) < dear.band(4) < dear.band(8) == pytest.approx(0.25)


class _Row:
    def __init__(self, n: int, predicted: dict, measured: float) -> None:
        self.number, self.state, self.search = n, TrialState.COMPLETE, {"predicted": predicted}
        self.measurements = [
            type("M", (), {"workload": "w", "concurrency": 4, "metrics": {"x": measured}})()
        ]


def _pred(value: float, notes: list[str]) -> dict:
    return {"value": value, "notes": notes}


def test_calibration_counts_only_the_predicting_models_errors():
    """The prior's 50 % miss on the first launch does not widen what the fitted models
    predict; the offline model's 10 % miss widens offline predictions only."""
    prior = _pred(200.0, ["step cost: prior (fixed 0.00, 0.050 a token)"])
    offline = _pred(100.0, ["step cost: verify cost from other methods' launches (...)"])
    depth = _pred(100.0, ["tau from the per-position acceptance of trial 3 (k=6)"])
    assert [prediction_source(p) for p in (prior, offline, depth)] == [None, "offline", "depth"]
    rows = [_Row(1, prior, 100.0), _Row(2, offline, 110.0), _Row(3, depth, 101.0)]
    level = ("w", 4)
    assert calibration(rows, "x", level, "offline").median == pytest.approx(0.1)
    assert calibration(rows, "x", level, "depth").median == pytest.approx(0.01)
    assert calibration(rows, "x", level).median == pytest.approx(0.1)  # all three: the median
    assert calibration(rows, "x", level).n == 3


def test_the_launch_noise_in_measured_errors_is_not_counted_as_the_models():
    """Each error holds the noise of the launch it was measured on: with a launch noise of
    5 % (log sd) three 10 % errors leave sqrt((0.10/0.6745)^2 - 0.05^2) of the model's own;
    errors no larger than the noise leave nothing; bias-corrected errors the same."""
    depth = _pred(100.0, ["tau from the per-position acceptance of trial 3 (k=6)"])
    rows = [_Row(n, depth, 110.0) for n in (1, 2, 3)]
    level = ("w", 4)
    plain = calibration(rows, "x", level, "depth")
    assert plain.median == pytest.approx(0.1) and plain.n == 3
    left = calibration(rows, "x", level, "depth", noise=0.05)
    sd = math.sqrt((0.1 / 0.6745) ** 2 - 0.05**2)
    assert left.median == pytest.approx(0.6745 * sd) and left.n == 3
    assert calibration(rows, "x", level, "depth", noise=0.2).median == 0.0
    spread = [_Row(n, depth, v) for n, v in ((1, 100.0), (2, 110.0), (3, 125.0))]
    plain = calibration(spread, "x", level, "depth", correct=True)
    left = calibration(spread, "x", level, "depth", correct=True, noise=0.05)
    assert left.bias == plain.bias > 0  # the bias is the model's: the noise is in the scatter
    sd = math.sqrt((plain.median / 0.6745) ** 2 - 0.05**2)
    assert left.median == pytest.approx(0.6745 * sd) and 0 < left.median < plain.median


def test_own_noise_pools_what_the_job_launched_twice():
    """The job's own between-launch spread at the level (log sd), 0 before anything was
    launched twice; a disturbed launch is left out, as the report's spread leaves it."""

    def row(*values: float, disturbed: bool = False) -> object:
        launches = [{"x": v, "output_tok_per_s": v} for v in values]
        if disturbed:
            launches[-1]["disturbed"] = True
        m = {"output_tok_per_s": values[0], "launches": launches}
        return type(
            "R",
            (),
            {"measurements": [type("M", (), {"workload": "w", "concurrency": 4, "metrics": m})()]},
        )()

    level = ("w", 4)
    assert own_noise([row(100.0), row(50.0)], "output_tok_per_s", level) == 0.0
    twice = own_noise([row(100.0, 121.0), row(50.0)], "output_tok_per_s", level)
    assert twice == pytest.approx(math.log(1.21) / math.sqrt(2))
    assert own_noise([row(100.0, 121.0, disturbed=True)], "output_tok_per_s", level) == 0.0
    assert own_noise([row(100.0, 121.0)], "output_tok_per_s", ("w", 1)) == 0.0
    # the space's prior stands in before anything was launched twice, never after
    assert own_noise([row(100.0), row(50.0)], "output_tok_per_s", level, 0.1) == 0.1
    assert own_noise([row(100.0, 121.0)], "output_tok_per_s", level, 0.1) == pytest.approx(twice)


def test_enough_measured_errors_replace_the_a_priori_band():
    """Fewer than three errors widen the model's band by their median; three or more are
    the band (median / 0.6745), never below half the model's own."""
    assert Calibration(0.08, 2).band(0.2) == pytest.approx(0.28)
    assert Calibration(0.08, 3).band(0.2) == pytest.approx(0.08 / 0.6745)
    assert Calibration(0.01, 5).band(0.2) == pytest.approx(0.1)
    assert Calibration().band(0.2) == pytest.approx(0.2)


def test_a_medusa_checkpoint_costs_one_head_a_drafted_token(tmp_path):
    """Each Medusa head drafts one token: its share is one head's block and lm_head over
    the target's parameters, not the whole checkpoint read as a transformer layer stack."""
    from tests.helpers import TINY
    from tuner.search._step_cost import _params

    got = _params(str(TINY / "medusa"))
    assert got == 256 * 256 + 4096 * 256  # one block (1 layer) and one lm_head
    assert got / _params(str(TINY / "target")) < 0.25  # read as a layer stack: 0.40


def test_a_sibling_lookup_is_priced_against_the_launched_one(space):
    """The offline model's bias on a method is read where the model stands now, at the
    launched lookup (its step cost learned from that launch): the baseline at 100 tok/s and
    10 ms a step, the lookup launched at k=4 (14 ms a step, offline tau 3.1) predicted at
    100 * 3.1 * 10 / 14 = 221 tok/s and measured at 180; the bias is log(180 / 221), shrunk
    for one launch's noise. A launch the model predicts exactly has none; no priced launch,
    no reading (the stored predictions' calibration stands)."""

    acc = OfflineAcceptance(4, (0.8, 0.6, 0.4, 0.3), 10, 40, 21)
    prices = OfflinePrices({family_key(NGRAM): {4: acc}})
    base = DepthPoint(0, 0, {"mean_itl_ms": 10.0, "output_tok_per_s": 100.0})
    model = 100.0 * 3.1 * 10.0 / 14.0

    def bias(measured: float) -> float | None:
        pt = DepthPoint(1, 4, {"mean_itl_ms": 14.0, "output_tok_per_s": measured})
        own = [({**NGRAM, "num_speculative_tokens": 4}, pt)]
        return _residual_bias(space, own, own, base, prices, "output_tok_per_s")

    assert bias(180.0) == pytest.approx(math.log(180.0 / model) * shrink(1))
    assert 0.8 < shrink(1) < 1.0
    assert bias(model) == pytest.approx(0.0, abs=1e-9)
    other = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    pt = DepthPoint(1, 4, {"mean_itl_ms": 14.0, "output_tok_per_s": 180.0})
    unpriced = [({**other, "num_speculative_tokens": 4}, pt)]
    assert _residual_bias(space, unpriced, unpriced, base, prices, "output_tok_per_s") is None


def test_a_method_never_launched_carries_the_launched_proposers_miss(tmp_path, monkeypatch):
    """A FAKE chain surface (tests/search/chain_surface.py): the baseline and the EAGLE head
    at k=3 launched, the head's offline price a third below what its launch accepted, so
    the offline model under-predicts that launch. The n-gram lookups, never launched, carry
    that miss: the model holds the head's measured step, so what it misses there is the
    target's and the engine's. (Dropped once, when a clipped step line missed a real job's
    suffix launches 2.4x; ``line_fit`` holds them within 0.82-1.07 now.) The draft model,
    never launched either, carries the same miss, read once for both."""
    space = loads_space(SPACE, base_dir=tmp_path)
    at = {"max_num_seqs": 4, "memory_fraction": 0.4}
    head = {"method": "eagle", "head": "head", **at, "num_speculative_tokens": 3}

    def acc(k: int, per: list[float]) -> OfflineAcceptance:
        return OfflineAcceptance(k, tuple(per[:k]), 10, 10 * k, int(10 * sum(per[:k])))

    ngram = {**NGRAM, "prompt_lookup_max": 3}
    prices = OfflinePrices(
        {
            family_key(head): {k: acc(k, [a * 0.67 for a in ACCEPT["head"]]) for k in (1, 2, 3)},
            family_key(ngram): {k: acc(k, ACCEPT["ngram1"]) for k in (1, 2, 3, 4)},
            family_key(DRAFT): {k: acc(k, ACCEPT["draft-a"]) for k in (1, 2, 3)},
        }
    )
    rows = [trial_row(0, {"method": "none", **at}), trial_row(1, head)]
    base = DepthPoint(0, 0, dict(rows[0].measurements[0].metrics))
    launched = [(head, DepthPoint(1, 3, dict(rows[1].measurements[0].metrics)))]
    miss = _residual_bias(space, launched, launched, base, prices, "output_tok_per_s")
    assert miss is not None and miss > 0.1  # the head's own price is corrected by it
    lay = Layout.of(space, rows, lambda c: 0.4, None)
    calls = []

    def counted(*args, **kw):
        calls.append(args[1] is args[2])  # every launched proposer's: a method not launched
        return _residual_bias(*args, **kw)

    monkeypatch.setattr("tuner.search._offline._residual_bias", counted)
    got = offline_predictions(space, rows, lay, prices, set())
    unlaunched = [p for c, p, _ in got if c["method"] in ("ngram", "draft_model")]
    assert {c["method"] for c, _, _ in got} == {"eagle", "ngram", "draft_model"}
    assert all(f"x{math.exp(miss):.3f}: this job's measured bias" in p.notes for p in unlaunched)
    assert calls.count(True) == 1
