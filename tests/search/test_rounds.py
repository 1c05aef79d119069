"""Rounds priced by what they hold (``tuner.search._depth.round_cost``): where the engine
says how long a request's prefill took, the rest of its time is its decode rounds, however
late its first chunk reached the client; a proposer that drafts only when it finds a match
is charged for the tokens it drafts, not for its cap."""

from __future__ import annotations

import pytest

from tests.helpers import histogram_text
from tests.search.chain_surface import SPACE
from tuner.engines import parse_prefill_time
from tuner.metrics import histogram_mean_ms
from tuner.offline import OfflineAcceptance
from tuner.search import DepthPoint, step_costs
from tuner.search._depth import predict_from_baseline, round_cost
from tuner.space import loads_space

NGRAM = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 3}
SUFFIX = {"method": "suffix"}


def _base(prefill: float | None, ttft: float = 190.0) -> DepthPoint:
    """A baseline whose front end was starved: 12 requests of 65 tokens, 300 ms each; the
    first chunk seen at 190 ms though the engine finished prefill at ``prefill``."""
    m = {
        "mean_ttft_ms": ttft,
        "mean_e2e_ms": 300.0,
        "mean_tpot_ms": (300.0 - ttft) / 64,
        "mean_itl_ms": (300.0 - ttft) / 64,
        "output_tok_per_s": 200.0,
        "num_ok": 36,
        "output_tokens": 36 * 65,
        "repeats": 3,
        "mean_queue_ms": 0.0,
    }
    if prefill is not None:
        m["mean_prefill_ms"] = prefill
    return DepthPoint(0, 0, m)


def _ngram(depth: int, e2e: float) -> DepthPoint:
    """An n-gram launch: of a request's 64 decoded tokens, 24 accepted over 40 rounds, 25 of
    which drafted (2 tokens each on average: 50 drafted)."""
    m = {
        "mean_ttft_ms": 12.0,
        "mean_e2e_ms": e2e,
        "mean_itl_ms": 6.0,
        "mean_prefill_ms": 10.0,
        "mean_queue_ms": 0.0,
        "output_tok_per_s": 300.0,
        "num_ok": 36,
        "output_tokens": 36 * 65,
        "repeats": 3,
        # counters are one run's (12 requests), as stored
        "num_drafts": 12 * 25,
        "num_draft_tokens": 12 * 50,
        "num_accepted_tokens": 12 * 24,
        "per_position_acceptance": [0.6] * depth,
    }
    return DepthPoint(1, depth, m)


@pytest.fixture
def space(tmp_path):
    return loads_space(SPACE, base_dir=tmp_path)


def test_prefill_time_from_the_engines_histogram():
    def text(total: float, count: int) -> str:
        return histogram_text("request_prefill_time_seconds", total, count)

    before, after = parse_prefill_time(text(0.1, 10)), parse_prefill_time(text(0.3, 30))
    assert histogram_mean_ms(before, after) == pytest.approx(10.0)
    assert parse_prefill_time("") is None


def test_a_round_is_the_time_after_prefill_over_the_rounds():
    rc = round_cost(_base(10.0))
    assert rc is not None
    assert rc.ms == pytest.approx((300.0 - 10.0) / 64)  # not (300 - 190) / 64
    assert (rc.drafted, rc.share) == (0.0, 0.0)
    spec = round_cost(_ngram(4, 210.0))
    assert spec is not None
    assert spec.ms == pytest.approx(200.0 / 40)
    assert spec.drafted == pytest.approx(50 / 40)
    assert spec.share == pytest.approx(25 / 40)


def test_without_the_engines_prefill_rounds_are_unknown():
    assert round_cost(_base(None)) is None
    m = dict(_ngram(4, 210.0).metrics)
    del m["num_draft_tokens"]
    assert round_cost(DepthPoint(1, 4, m)) is None


def test_a_late_first_chunk_does_not_cap_the_predicted_speedup():
    """Each round commits 3 tokens at the baseline's step cost: decode takes a third. With
    the engine's prefill (10 ms) the request takes 10 + 290 / 3 ms; read from the client's
    TTFT (190 ms) it would take 190 + 110 / 3, and the speedup would look capped."""
    acc = [1.0, 1.0]
    fast = predict_from_baseline(2, acc, _base(10.0), "output_tok_per_s", 0.0, 0.0, 0.1)
    capped = predict_from_baseline(2, acc, _base(None), "output_tok_per_s", 0.0, 0.0, 0.1)
    assert fast is not None and capped is not None
    assert fast.metrics["mean_e2e_ms"] == pytest.approx(10.0 + 290.0 / 3)
    assert capped.metrics["mean_e2e_ms"] == pytest.approx(190.0 + 110.0 / 3)
    assert fast.metrics["output_tok_per_s"] > 1.5 * capped.metrics["output_tok_per_s"]


def test_a_launch_is_charged_per_token_it_drafted_not_per_depth(space):
    """The n-gram at depth 4 drafted 1.25 tokens a round and its round cost 5 ms against the
    baseline's 290 / 64: the verify cost is its extra over 1.25 tokens, not over 4. Another
    lookup (suffix trees) borrows it split as the n-gram's own one depth is."""
    base, launch = _base(10.0), _ngram(4, 210.0)
    e = 5.0 / (290.0 / 64) - 1.0
    other = step_costs(space, [({**NGRAM}, launch)], base, {**SUFFIX})
    assert other.per_token == pytest.approx(e / (2 * 1.25))
    assert other.fixed == pytest.approx(e / (2 * 25 / 40))
    own = step_costs(space, [({**NGRAM}, launch)], base, {**NGRAM})
    assert own.per_token == pytest.approx(e / (2 * 1.25))
    assert own.fixed == pytest.approx(e / (2 * 25 / 40))
    # Without the engine's prefill the same launch is read by its depth, as before.
    old = step_costs(space, [({**NGRAM}, launch)], _base(None), {**SUFFIX})
    assert old.how == "verify cost from other methods' launches, split"
    assert old.per_token != pytest.approx(other.per_token)


def test_an_offline_price_knows_the_rounds_it_drafted():
    acc = OfflineAcceptance(4, (0.8, 0.5, 0.4, 0.3), 60, 200, 120, num_rounds=100)
    assert acc.draft_share == pytest.approx(0.6)
    assert acc.drafted_per_round == pytest.approx(2.0)
    old = OfflineAcceptance(4, (0.8, 0.5, 0.4, 0.3), 60, 200, 120)
    assert (old.draft_share, old.drafted_per_round) == (1.0, None)


def test_a_line_through_close_depths_never_prices_a_step_below_the_baseline():
    """Two launches at depths 7 and 8 a step apart in cost (noise): the line falls
    below the baseline's step at depth 1, which a drafting step never costs."""
    from tuner.search._depth import predict_depth

    def spec(trial: int, k: int, itl: float) -> DepthPoint:
        m = {
            "mean_itl_ms": itl,
            "mean_tpot_ms": itl / 3.5,
            "mean_ttft_ms": 15.0,
            "mean_e2e_ms": 15.0 + 64 * itl / 3.5,
            "output_tok_per_s": 350.0,
            "per_position_acceptance": [0.8, 0.6, 0.4, 0.3, 0.2, 0.1, 0.05, 0.05][:k],
        }
        return DepthPoint(trial, k, m)

    base = DepthPoint(0, 0, {**_base(None, ttft=15.0).metrics, "mean_itl_ms": 4.0})
    pts = [spec(1, 8, 9.0), spec(2, 7, 8.0)]  # the line: s(k) = 1 + k ms
    p = predict_depth(1, pts, base, "output_tok_per_s")
    assert p is not None
    # Its step (ITL: one chunk a step) at least the baseline's, not the line's 2 ms.
    assert p.metrics["mean_itl_ms"] >= 4.0 * 0.999
