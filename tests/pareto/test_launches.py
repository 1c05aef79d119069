"""The launch is the unit of replication (issue 21): per-launch records, the job's pooled
between-launch spread, and the intervals, verdicts, winner confirmation and equivalence built
on it. Points are typed in (no engine runs here); the launch values are of the size measured
on the 2-core CPU machine (baseline ~300 tok/s, n-gram k=4 ~550 tok/s at concurrency 1)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from tuner.confirm import (
    MAX_LAUNCHES,
    Confirmation,
    can_still_tell,
    next_launch,
    worth_a_launch,
)
from tuner.explain import launch_sentences
from tuner.launches import (
    BETWEEN,
    WITHIN,
    launch_count,
    launch_interval,
    launch_record,
    launches_of,
    merge_launch,
    pooled_spread,
    ratio_interval,
    spread_values,
)
from tuner.pareto import Point, Report, feasible, level_spreads, select_winner
from tuner.stats import t975
from tuner.verdict import verdicts

OBJ = [("output_tok_per_s", "maximize"), ("p99_tpot_ms", "minimize")]
TOKENS = 64  # per request


def _launch(tps: float, *, noisy: bool = False) -> dict[str, Any]:
    """One launch's stored point at concurrency 1: ms per token follows tok/s."""
    ms_tok = 1000.0 / tps
    return {
        "workload": "code_completion",
        "concurrency": 1,
        "output_tok_per_s": tps,
        "mean_e2e_ms": ms_tok * TOKENS,
        "output_tokens": TOKENS * 12,
        "num_ok": 12,
        "num_failed": 0,
        "p99_tpot_ms": ms_tok,
        "noisy": noisy,
        "relative_mad": 0.3 if noisy else 0.03,
        "stats": {
            "output_tok_per_s": {
                "median": tps,
                "ci95_low": tps * 0.97,
                "ci95_high": tps * 1.03,
                "n": 3,
            },
            "mean_e2e_ms": {
                "median": ms_tok * TOKENS,
                "ci95_low": ms_tok * TOKENS * 0.97,
                "ci95_high": ms_tok * TOKENS * 1.03,
                "n": 3,
            },
        },
    }


def _point_of(*tps: float, disturbed: tuple[int, ...] = ()) -> dict[str, Any]:
    """A point launched once per value (the first is the search launch)."""
    m = _launch(tps[0], noisy=0 in disturbed)
    m["launches"] = [launch_record(m, confirm=False)]
    for i, v in enumerate(tps[1:], start=1):
        m = merge_launch(m, _launch(v, noisy=i in disturbed))
    return m


def _report(points: dict[int, tuple[str, dict[str, Any]]]) -> Report:
    """A report at concurrency 1 the way ``job_report`` builds one (trial 0: the baseline)."""
    pts = []
    for n, (method, m) in points.items():
        ok, why = feasible(m, {}, noise_counts=method != "none")
        pts.append(Point(n, method, {"method": method, "k": n}, {}, m, ok, why))
    by_trial = {p.trial_number: {1: p.metrics} for p in pts}
    spreads = level_spreads(by_trial, [o for o, _ in OBJ])
    base = next(p for p in pts if p.method == "none")
    per_tok = {1: spreads.get(1, {}).get("ms_per_token")}
    vd = {p.trial_number: verdicts({1: p.metrics}, {1: base.metrics}, per_tok) for p in pts}
    vd.pop(base.trial_number)
    front = [p for p in pts if p.feasible]
    return Report(
        1,
        "code_completion",
        1,
        {},
        OBJ,
        pts,
        front,
        base,
        select_winner(front, OBJ),
        vd,
        {},
        {1: base.metrics},
        spreads=spreads.get(1, {}),
    )


def test_the_pooled_spread_is_the_log_scale_variance_over_configurations_launched_twice():
    a, b = [300.0, 250.0, 350.0], [500.0, 600.0]
    sp = pooled_spread([a, b, [400.0]])  # one launch: no variance to pool
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    ss = sum((x - sum(la) / 3) ** 2 for x in la) + sum((x - sum(lb) / 2) ** 2 for x in lb)
    assert sp is not None and sp.df == 3 and sp.configurations == 2
    assert sp.log_sd == pytest.approx(math.sqrt(ss / 3))
    assert pooled_spread([[300.0], [500.0]]) is None


def test_a_configuration_launched_once_carries_the_job_spread():
    sp = pooled_spread([[300.0, 360.0], [500.0, 430.0]])
    assert sp is not None
    mid, lo, hi = launch_interval([550.0], sp)
    assert mid == pytest.approx(550.0)
    # where one more launch lands: t(df) s sqrt(1 + 1/n) on the log scale
    assert math.log(hi / mid) == pytest.approx(t975(sp.df) * sp.log_sd * math.sqrt(2))
    assert math.log(mid / lo) == pytest.approx(t975(sp.df) * sp.log_sd * math.sqrt(2))
    _, lo2, hi2 = launch_interval([550.0, 550.0], sp)
    assert math.log(hi2 / 550.0) == pytest.approx(t975(sp.df) * sp.log_sd * math.sqrt(1.5))
    r, rlo, rhi = ratio_interval([600.0], [300.0, 300.0], sp)
    assert r == pytest.approx(2.0)
    assert math.log(rhi / r) == pytest.approx(t975(sp.df) * sp.log_sd * math.sqrt(1.5))


def test_merging_a_launch_combines_by_geometric_mean_and_keeps_the_search_numbers():
    m = _point_of(400.0, 250.0)
    assert m["output_tok_per_s"] == pytest.approx(math.sqrt(400.0 * 250.0))
    assert m["confirmed"] and m["search"]["output_tok_per_s"] == 400.0
    assert [r["confirm"] for r in m["launches"]] == [False, True]
    assert launch_count(m) == 2 and not m["noisy"]


def test_a_disturbed_launch_is_kept_but_left_out_once_a_clean_one_exists():
    m = _point_of(150.0, 300.0, 320.0, disturbed=(0,))
    assert len(launches_of(m)) == 3 and launch_count(m) == 2
    assert m["output_tok_per_s"] == pytest.approx(math.sqrt(300.0 * 320.0))
    assert not m["noisy"]
    every = _point_of(150.0, 300.0, disturbed=(0, 1))
    # every launch disturbed: its value rests on them all, but it counts as confirmed by
    # none and the pooled spread leaves it out
    assert every["noisy"] and launch_count(every) == 0
    assert every["output_tok_per_s"] == pytest.approx(math.sqrt(150.0 * 300.0))
    assert spread_values(every, "output_tok_per_s") == []
    assert spread_values(m, "output_tok_per_s") == [300.0, 320.0]


def test_a_point_stored_before_launch_records_reads_its_search_launch():
    old = _launch(300.0)
    old.update(confirmed=True, search={"output_tok_per_s": 400.0, "noisy": False})
    recs = launches_of(old)
    assert [r["output_tok_per_s"] for r in recs] == [400.0, 300.0]
    assert launches_of(_launch(300.0))[0]["output_tok_per_s"] == 300.0


def test_verdicts_and_intervals_use_the_spread_between_launches():
    rep = _report(
        {
            0: ("none", _point_of(300.0, 260.0)),
            1: ("ngram", _point_of(560.0, 600.0)),
            2: ("draft_model", _point_of(330.0)),
        }
    )
    v1 = rep.verdict(rep.points[1])
    assert v1 is not None and v1.interval_kind == BETWEEN and v1.state == "pays"
    assert v1.speedup == pytest.approx(math.sqrt(560 * 600) / math.sqrt(300 * 260), rel=1e-6)
    # Launched once and 15% above the baseline: the job's spread says it cannot tell.
    v2 = rep.verdict(rep.points[2])
    assert v2 is not None and v2.state == "tied" and "between launches" in v2.text()
    lo, hi, kind = rep.interval(rep.points[2], "output_tok_per_s")
    assert kind == BETWEEN and lo < 300.0 < 330.0 < hi


def test_without_a_second_launch_intervals_say_they_are_within_one_launch():
    rep = _report({0: ("none", _point_of(300.0)), 1: ("ngram", _point_of(560.0))})
    assert rep.spreads == {}
    v = rep.verdict(rep.points[1])
    assert v is not None and v.interval_kind == WITHIN and v.state == "pays"
    assert rep.interval(rep.points[1], "output_tok_per_s")[2] == WITHIN
    assert not rep.winner_confirmed
    text = " ".join(launch_sentences(rep))
    assert "Nothing was launched twice" in text and "The winner is unconfirmed" in text


def test_winner_confirmed_and_what_the_job_cannot_tell_apart_from_it():
    rep = _report(
        {
            0: ("none", _point_of(300.0, 270.0)),
            1: ("ngram", _point_of(560.0, 520.0)),
            2: ("eagle", _point_of(500.0)),  # within the spread of the winner
            3: ("draft_model", _point_of(330.0)),  # far below it
        }
    )
    assert rep.winner is not None and rep.winner.trial_number == 1
    assert rep.winner_confirmed
    assert [p.trial_number for p in rep.equivalent_to_winner] == [2]
    text = " ".join(launch_sentences(rep))
    assert "The winner is confirmed: 2 undisturbed launches" in text
    assert "cannot tell these apart from the winner" in text and "trial 2 (eagle" in text


def test_the_baseline_is_never_infeasible_for_noise():
    noisy = _launch(300.0, noisy=True)
    assert feasible(noisy, {}, noise_counts=False) == (True, ())
    ok, why = feasible(noisy, {})
    assert not ok and why[0].startswith("noisy")


def test_confirmation_launches_the_baseline_then_the_winner_until_each_has_two():
    one = {0: ("none", _point_of(300.0)), 1: ("ngram", _point_of(560.0))}
    assert next_launch(_report(one), finalists=2) == 0
    two = {0: ("none", _point_of(300.0, 280.0)), 1: ("ngram", _point_of(560.0))}
    assert next_launch(_report(two), finalists=2) == 1
    # A launch that failed is not tried again: nothing else is worth a launch here.
    assert next_launch(_report(two), finalists=2, failed={1}) is None


def test_a_disturbed_baseline_launch_is_launched_again_not_dropped():
    pts = {0: ("none", _point_of(120.0, 300.0, disturbed=(0,))), 1: ("ngram", _point_of(560.0))}
    rep = _report(pts)
    assert rep.baseline is not None and rep.baseline.feasible
    assert next_launch(rep, finalists=2) == 0


def test_finalists_the_job_cannot_tell_apart_are_launched_in_turn():
    pts = {
        0: ("none", _point_of(300.0, 280.0)),
        1: ("ngram", _point_of(560.0, 540.0)),
        2: ("eagle", _point_of(520.0)),
    }
    assert next_launch(_report(pts), finalists=2) == 2  # B has fewer launches: B
    pts[2] = ("eagle", _point_of(520.0, 530.0))
    assert next_launch(_report(pts), finalists=2) == 1  # both at 2: A, then B
    assert next_launch(_report(pts), finalists=1) is None  # no finalists; the verdict pays
    full = {
        n: (meth, _point_of(*([v] * MAX_LAUNCHES)))
        for n, (meth, v) in {0: ("none", 300.0), 1: ("ngram", 560.0), 2: ("eagle", 555.0)}.items()
    }
    assert next_launch(_report(full), finalists=2) is None  # each at the cap


def test_a_tied_winner_verdict_launches_the_side_with_fewer_launches():
    pts = {0: ("none", _point_of(300.0, 250.0)), 1: ("ngram", _point_of(330.0, 360.0))}
    rep = _report(pts)
    v = rep.verdict(rep.points[1])
    assert v is not None and v.state == "tied"
    assert next_launch(rep, finalists=1) in (0, 1)
    pts[0] = ("none", _point_of(300.0, 250.0, 280.0))
    assert next_launch(_report(pts), finalists=1) == 1


def test_with_nothing_feasible_a_point_kept_off_only_by_noise_is_launched_again():
    base = _point_of(300.0, 290.0)
    base["num_failed"] = 1  # infeasible for another reason than noise
    pts = {0: ("none", base), 1: ("ngram", _point_of(560.0, disturbed=(0,)))}
    rep = _report(pts)
    assert rep.winner is None
    assert next_launch(rep, finalists=2) == 1
    assert next_launch(rep, finalists=2, failed={1}) is None


def test_a_noisy_point_that_would_beat_the_winner_is_launched_again_first():
    pts = {
        0: ("none", _point_of(300.0, 290.0)),
        1: ("ngram", _point_of(500.0)),
        2: ("eagle", _point_of(650.0, disturbed=(0,))),  # off the front for noise only
        3: ("draft_model", _point_of(200.0, disturbed=(0,))),  # noisy, but below the winner
    }
    rep = _report(pts)
    assert rep.winner is not None and rep.winner.trial_number == 1
    assert next_launch(rep, finalists=2) == 2
    assert next_launch(rep, finalists=2, failed={2}) == 1  # then the winner's second launch
    # With one launch left, it goes to the winner: the answer itself must not stay unconfirmed.
    assert next_launch(rep, finalists=2, budget_left=1) == 1
    assert next_launch(rep, finalists=2, budget_left=2) == 2


def test_the_search_keeps_one_confirmation_launch_for_a_winner_it_finds_later():
    space = SimpleNamespace(
        measurement=SimpleNamespace(confirm_top=1, confirm_budget=2),
        stop_margin=0.03,
        stop_min_gain=0.01,
    )
    conf = Confirmation(SimpleNamespace(space=space), SimpleNamespace(live=True))
    rep = _report({0: ("none", _point_of(300.0, 290.0)), 1: ("ngram", _point_of(500.0))})
    assert conf.next(rep) == 1 and conf.next(rep, reserve=1) == 1
    conf.spent = 1
    assert conf.next(rep, reserve=1) is None  # the last launch is kept
    assert conf.next(rep) == 1  # and spent once the search is over


def test_the_runner_up_is_launched_twice_even_when_one_launch_set_it_apart():
    # One unlucky launch of the runner-up (15% below the winner) tells nothing of the next.
    pts = {
        0: ("none", _point_of(300.0, 302.0)),
        1: ("ngram", _point_of(560.0, 565.0)),
        2: ("ngram", _point_of(480.0)),
        3: ("eagle", _point_of(400.0)),
    }
    rep = _report(pts)
    assert rep.equivalent_to_winner == []
    assert next_launch(rep, finalists=2) == 2
    assert next_launch(rep, finalists=3, failed={2}) == 3
    pts[2] = ("ngram", _point_of(480.0, 470.0))
    assert next_launch(_report(pts), finalists=2) is None  # told apart, and the verdict pays


def test_a_finalist_is_launched_again_only_while_it_may_still_win():
    """A runner-up launched once at 495 against a winner at 500 and 510: with the job's
    narrow spread it cannot gain 1 % beyond +3 %, so it is not launched again (it is named as
    equivalent or beaten by its interval); with a wide spread it may, and it is. With no
    gain asked (min_gain 0) every finalist gets its second launch, as before."""
    narrow = _report(
        {
            0: ("none", _point_of(300.0, 301.0)),
            1: ("ngram", _point_of(500.0, 510.0)),
            2: ("ngram", _point_of(495.0)),
        }
    )
    assert next_launch(narrow, finalists=2) == 2
    assert next_launch(narrow, finalists=2, margin=0.03, min_gain=0.01) is None
    assert not worth_a_launch(narrow, narrow.points[2], narrow.points[1], 0.03, 0.01)
    wide = _report(
        {
            0: ("none", _point_of(300.0, 220.0)),
            1: ("ngram", _point_of(500.0, 510.0)),
            2: ("ngram", _point_of(495.0)),
        }
    )
    assert worth_a_launch(wide, wide.points[2], wide.points[1], 0.03, 0.01)
    assert next_launch(wide, finalists=2, margin=0.03, min_gain=0.01) == 2


def test_ties_no_budget_left_could_tell_apart_are_not_launched_in_turn():
    """A, B in turn only while the launches left could still tell them apart: every one
    spent on the pair, would the 95 % interval of their ratio exclude 1 around today's
    estimate? Here the spread (pooled over the baseline, A and B) is about 3.6 %: B 2 % below
    A is futile with 2 launches left (each to 3, half-width about 8 %) and also with 10 (4
    each, the cap: about 6 %); B 9 % below A (half-width 11 % today) can still be told apart
    and is launched in turn."""
    pts = {
        0: ("none", _point_of(300.0, 280.0)),
        1: ("ngram", _point_of(560.0, 540.0)),
        2: ("eagle", _point_of(550.0, 525.0)),
    }
    rep = _report(pts)
    a, b = rep.points[1], rep.points[2]
    assert rep.indistinguishable(b, a)
    assert next_launch(rep, finalists=2) == 1  # no budget given: in turn, as before
    assert not can_still_tell(rep, b, a, 2) and not can_still_tell(rep, b, a, 10)
    assert next_launch(rep, finalists=2, budget_left=2) is None
    pts[2] = ("eagle", _point_of(510.0, 490.0))
    far = _report(pts)
    assert far.indistinguishable(far.points[2], far.points[1])
    assert can_still_tell(far, far.points[2], far.points[1], 4)
    assert next_launch(far, finalists=2, budget_left=4) == 1


def test_a_runner_up_no_budget_could_tell_from_the_winner_is_named_not_launched_again():
    """A runner-up launched once, 1 % below a winner launched twice, with a wide spread
    (baseline 300 / 240, about 16 %): one more launch would move which of two ties ranks
    first, and even four could not tell them apart, so it is named equivalent, not launched.
    The same runner-up 40 % below can still be told apart and gets its second launch (one
    unlucky launch tells nothing of the next); without a budget, every finalist does."""
    pts = {
        0: ("none", _point_of(300.0, 240.0)),
        1: ("suffix", _point_of(400.0, 380.0)),
        2: ("suffix", _point_of(386.0)),
    }
    rep = _report(pts)
    w, b = rep.points[1], rep.points[2]
    assert rep.winner is w and rep.indistinguishable(b, w)
    assert not can_still_tell(rep, b, w, 4)
    # Not the runner-up: the winner's verdict is tied at this spread, so baseline or winner.
    assert next_launch(rep, finalists=2, budget_left=4) in (0, 1)
    assert b in rep.equivalent_to_winner
    assert next_launch(rep, finalists=2) == 2  # no budget given: to two launches, as before
    pts[2] = ("suffix", _point_of(230.0))
    far = _report(pts)
    assert can_still_tell(far, far.points[2], far.points[1], 4)
    assert next_launch(far, finalists=2, budget_left=4) == 2
