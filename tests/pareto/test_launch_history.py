"""The machine's history pooled into a job's between-launch spread (issue 32): the capped
empirical-Bayes pool, its numbers, the cap, the F-test guard, a first job unchanged, and a
job that launched nothing twice taking the history's spread. Points are typed in (no engine
runs); the sizes are the 2-core CPU machine's (baseline ~300 tok/s, n-gram ~500 tok/s)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tests.pareto.test_launches import _launch, _point_of, _report
from tuner.launch_history import (
    HISTORY_CAP,
    f_sf,
    history_spreads,
    history_text,
    job_spreads,
    pool_with_history,
)
from tuner.launches import BETWEEN, HistorySpread, pooled_spread, ratio_interval
from tuner.pareto import level_spreads
from tuner.stats import t975
from tuner.verdict import verdicts

OBJ = [("output_tok_per_s", "maximize"), ("p99_tpot_ms", "minimize")]
# This job: two configurations launched twice, about 8 % apart (df 2, t = 4.30).
OWN = [[300.0, 335.0], [500.0, 560.0]]
# Three earlier jobs on the machine: 5 % between launches, 57 degrees of freedom.
HIST = HistorySpread(log_sd=0.05, df=57, jobs=3, configurations=20)


def _own():
    sp = pooled_spread(OWN)
    assert sp is not None and sp.df == 2
    return sp


def test_the_pool_weighs_the_job_and_a_capped_history_by_their_degrees_of_freedom():
    own = _own()
    sp = pool_with_history(own, HIST)
    assert sp is not None
    var = (2 * own.log_sd**2 + 20 * 0.05**2) / 22
    assert sp.log_sd == pytest.approx(math.sqrt(var))
    assert (sp.df, sp.own_df, sp.history_df, sp.history_jobs) == (22, 2, 20, 3)
    assert sp.configurations == 2 and sp.own_log_sd == pytest.approx(own.log_sd)
    assert sp.history == HIST and not sp.history_refused
    # the numbers: this job alone 7.9 %, history 5 %, pooled 5.3 % with t 2.07 for 4.30
    assert own.log_sd == pytest.approx(0.0791, abs=5e-4)
    assert sp.log_sd == pytest.approx(0.0533, abs=5e-4)
    assert t975(sp.df) == pytest.approx(2.074) and t975(own.df) == pytest.approx(4.303)
    # F = (0.0791 / 0.05)^2 = 2.5 on (2, 57): p 0.09, not below 0.05, so pooled
    assert sp.history_p == pytest.approx(f_sf(own.log_sd**2 / 0.05**2, 2, 57))
    assert 0.05 < sp.history_p < 0.1
    assert history_text(sp) == "df 22: this job 2 + 20 (of 57) from 3 earlier jobs on this machine"


def test_a_1_48x_gap_the_job_alone_cannot_tell_apart_is_told_apart_with_history():
    """The demo's case: 740 vs 500 tok/s, each launched once (df 2 alone)."""
    own = _own()
    _, lo, hi = ratio_interval([740.0], [500.0], own)
    assert lo < 1.0 < hi  # alone: t 4.30 * 7.9 % * sqrt(2) = 0.48 on the log scale
    pooled = pool_with_history(own, HIST)
    assert pooled is not None
    _, lo, hi = ratio_interval([740.0], [500.0], pooled)
    assert 1.0 < lo < 1.48 < hi  # with history: half-width 0.16, the gap 0.39
    assert math.log(hi / lo) / 2 == pytest.approx(2.074 * pooled.log_sd * math.sqrt(2))


def test_the_cap_bounds_what_history_adds_and_a_short_history_adds_all_it_has():
    own = _own()
    short = HistorySpread(0.05, 7, 1, 4)
    sp = pool_with_history(own, short)
    assert sp is not None and (sp.df, sp.history_df) == (9, 7)
    assert history_text(sp) == "df 9: this job 2 + 7 from 1 earlier job on this machine"
    assert HISTORY_CAP == 20
    for df_h in (20, 57, 500):
        sp = pool_with_history(own, HistorySpread(0.05, df_h, 3, 9))
        assert sp is not None and sp.history_df == 20 and sp.df == 22
    sp = pool_with_history(own, HIST, cap=5)
    assert sp is not None and sp.df == 7
    assert sp.log_sd == pytest.approx(math.sqrt((2 * own.log_sd**2 + 5 * 0.05**2) / 7))


def test_a_job_much_noisier_than_its_history_is_not_pooled_and_says_so():
    own = _own()  # 7.9 % against a history of 1 %: F = 62 on (2, 57)
    quiet = HistorySpread(0.01, 57, 3, 20)
    sp = pool_with_history(own, quiet)
    assert sp is not None
    assert sp.log_sd == own.log_sd and sp.df == 2 and sp.history_df == sp.history_jobs == 0
    assert sp.history_refused and sp.history == quiet and sp.history_p < 1e-6
    text = history_text(sp)
    assert text is not None and text.startswith("df 2, this job only: 3 earlier jobs")
    assert "measured 1.0%" in text and "not pooled" in text and "F-test p=" in text
    # the documented hours (docs/concepts/launches.md): 9 % today (df 2) against 2 % an
    # hour earlier (df 20) is refused
    today = replace(own, log_sd=0.09)
    assert pool_with_history(today, HistorySpread(0.02, 20, 1, 10)).history_refused
    # a history that never moved refuses any spread today, accepts none
    assert pool_with_history(own, HistorySpread(0.0, 10, 1, 2)).history_refused
    flat = pooled_spread([[300.0, 300.0]])
    got = pool_with_history(flat, HistorySpread(0.0, 10, 1, 2))
    assert got is not None and got.df == 11 and got.log_sd == 0.0
    # the guard is one-sided: a job quieter than its history is pooled (wider, never narrower)
    calm = pool_with_history(pooled_spread([[300.0, 301.0], [500.0, 501.0]]), HIST)
    assert calm is not None and calm.history_df == 20 and calm.log_sd > 0.003


def test_the_f_test_p_value_matches_the_tables():
    # 95 % points of F (any statistics table): F(2, 20) 3.49, F(1, 1) 161.4, F(5, 57) 2.38
    assert f_sf(3.4928, 2, 20) == pytest.approx(0.05, abs=1e-4)
    assert f_sf(161.45, 1, 1) == pytest.approx(0.05, abs=1e-4)
    assert f_sf(2.3844, 5, 57) == pytest.approx(0.05, abs=2e-3)
    assert f_sf(1.0, 7, 7) == pytest.approx(0.5)
    assert f_sf(0.0, 2, 3) == 1.0 and f_sf(math.inf, 2, 3) == 0.0


def test_the_f_test_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for d1 in (1, 2, 3, 8, 30):
        for d2 in (1, 4, 20, 57, 400):
            for f in (0.05, 0.7, 1.0, 2.5, 9.0, 80.0):
                assert f_sf(f, d1, d2) == pytest.approx(stats.f.sf(f, d1, d2), abs=1e-10)


def test_a_first_job_on_a_machine_is_exactly_as_before():
    own = _own()
    assert pool_with_history(own, None) is own
    assert pool_with_history(None, None) is None
    assert pool_with_history(own, HistorySpread(0.05, 0, 0, 0)) is own
    assert history_text(own) is None and own.own_df == 2 and own.history_df == 0
    by_trial = {0: {1: _point_of(300.0, 335.0)}, 1: {1: _point_of(500.0, 560.0)}}
    assert job_spreads(None, 1, "t", by_trial, OBJ) == level_spreads(by_trial, [m for m, _ in OBJ])


def test_a_job_that_launched_nothing_twice_takes_the_history_and_says_between():
    sp = pool_with_history(None, HIST)
    assert sp is not None
    assert (sp.log_sd, sp.df, sp.configurations, sp.own_df) == (0.05, 20, 0, 0)
    assert sp.own_log_sd is None and sp.history_jobs == 3 and sp.history_p is None
    assert history_text(sp) == (
        "df 20 (of 57), all from 3 earlier jobs on this machine: this job launched nothing twice"
    )
    # typed into a report: intervals and verdicts are between launches, not within one
    rep = _report({0: ("none", _launch(300.0)), 1: ("ngram", _launch(520.0))})
    assert rep.spreads == {}
    spreads = {"output_tok_per_s": sp, "ms_per_token": sp}
    base, spec = rep.points[0], rep.points[1]
    rep = replace(rep, spreads=spreads)
    assert rep.interval(spec, "output_tok_per_s")[2] == BETWEEN
    (v,) = verdicts({1: spec.metrics}, {1: base.metrics}, {1: sp})
    assert v.interval_kind == BETWEEN and v.state == "pays"


def test_history_pools_every_earlier_jobs_configurations_per_level_and_metric():
    a = [_point_of(300.0, 330.0, 310.0), _point_of(500.0, 540.0)]
    b = [_point_of(400.0, 410.0), _point_of(600.0)]  # another workload: same machine state
    for p in b:
        p["workload"] = "chat"
    c = [_point_of(450.0)]  # launched nothing twice: gives nothing, is not counted
    at2 = _point_of(200.0, 260.0)
    at2["concurrency"] = 2
    got = history_spreads({1: a, 2: b, 3: c, 4: [at2]}, ["output_tok_per_s"])
    h = got[1]["output_tok_per_s"]
    want = pooled_spread([[300.0, 330.0, 310.0], [500.0, 540.0], [400.0, 410.0]])
    assert want is not None
    assert (h.df, h.jobs, h.configurations) == (4, 2, 3)
    assert h.log_sd == pytest.approx(want.log_sd)
    assert got[2]["output_tok_per_s"].df == 1  # levels never mix
    assert set(got[1]) == {"output_tok_per_s", "ms_per_token", "p99_tpot_ms"}
