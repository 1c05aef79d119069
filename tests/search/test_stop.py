"""The job ends when nothing left can win: the outlook of what is not launched yet against
the winner's bound, on a replayed FAKE chain surface (no engine), and the stop reason where a
user reads it."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tests.search.chain_surface import point, write_chain_surface
from tuner import cli
from tuner.job import create_job, run_job
from tuner.launches import LaunchSpread
from tuner.pareto import Point, Report
from tuner.search import Candidate, Outlook, winner_bound
from tuner.search._stop import launch_noise
from tuner.space import parse_space
from tuner.stats import t975
from tuner.storage import Store
from tuner.surface import config_key, grid_configs, read_surface


def _replay_job(
    tmp_path, db_url, trials: int = 30, stop_early: bool = True, stop_margin: float = 0.03
) -> tuple[Store, int, object]:
    surface = write_chain_surface(tmp_path / "chain.jsonl")
    space = read_surface(surface).space
    data = space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(surface)}
    # Each launch answers with the one recorded point and confirmation is off: no launch
    # noise to assume (the 10 % default would make the margin's near ties moot).
    data.update(
        trials=trials, stop_early=stop_early, stop_margin=stop_margin, stop_launch_noise=0.0
    )
    store = Store(db_url)
    jid = create_job(store, parse_space(data, base_dir=tmp_path))
    run_job(store, jid, work_dir=tmp_path / "work")
    return store, jid, space


def test_the_search_stops_by_itself_once_nothing_can_win(tmp_path, db_url):
    """279 configurations, a cap of 30 trials: the job stops far earlier, with the best
    class found and a reason that gives its numbers."""
    store, jid, space = _replay_job(tmp_path, db_url)
    job = store.job(jid)
    launched = [r for r in store.trials(jid) if r.reused_from is None and r.state == "complete"]
    assert len(launched) < 15, [(r.number, r.params) for r in launched]
    assert job.stop_reason.startswith("nothing left can win: ")
    assert "configurations priced" in job.stop_reason  # near ties named, or the best's optimism
    assert "the winner's lower bound" in job.stop_reason
    truth = {config_key(c): point(c, 4)["output_tok_per_s"] for c in grid_configs(space)}
    best = max(truth.values())
    assert max(truth[config_key(r.params)] for r in launched) >= best * 0.98
    # the search is closed: no worker takes another slot
    assert store.trial_slots_left(jid) == 0 and not store.take_trial_slot(jid)


def test_a_closed_search_opens_again_only_while_budget_is_left(tmp_path, db_url):
    store, jid, _ = _replay_job(tmp_path, db_url)
    assert store.trial_slots_left(jid) == 0
    n = store.job(jid).trials_started
    assert store.reopen_search(jid)
    assert store.job(jid).stop_reason is None and store.trial_slots_left(jid) == 30 - n
    assert store.take_trial_slot(jid)
    store.set_stop_reason(jid, "closed again")
    (tmp_path / "cap").mkdir()
    capped, cid, _ = _replay_job(tmp_path / "cap", f"sqlite:///{tmp_path / 'cap.db'}", trials=3)
    assert not capped.reopen_search(cid)  # no budget left: it stays closed, reason kept
    assert capped.job(cid).stop_reason.startswith("trial budget spent")


def test_the_cap_still_caps(tmp_path, db_url):
    store, jid, _ = _replay_job(tmp_path, db_url, trials=3)
    launched = [r for r in store.trials(jid) if r.state == "complete"]
    assert len(launched) == 3
    assert store.job(jid).stop_reason.startswith("trial budget spent: 3 of 3 search trials")


def test_stop_early_false_spends_the_whole_budget(tmp_path, db_url):
    """The same job that stops by itself within 15 launches runs to its cap of 20 when asked
    to, and then says the budget ended it and that nothing left could win."""
    store, jid, _ = _replay_job(tmp_path, db_url, trials=20, stop_early=False)
    assert len(store.trials(jid)) == 20
    reason = store.job(jid).stop_reason
    assert reason.startswith("trial budget spent: 20 of 20 search trials; nothing left"), reason


def test_a_gain_below_the_margin_is_not_worth_a_launch(tmp_path):
    """Without the margin, every near tie whose band reaches the bare bound is launched; with
    3 % of the winner's value on top of the bound, fewer launches find as good a winner."""
    got = {}
    for margin in (0.0, 0.03):
        d = tmp_path / f"m{margin}"
        d.mkdir()
        store, jid, space = _replay_job(d, f"sqlite:///{d / 'spectune.db'}", stop_margin=margin)
        rows = [r for r in store.trials(jid) if r.reused_from is None]
        truth = {config_key(c): point(c, 4)["output_tok_per_s"] for c in grid_configs(space)}
        best = max(truth[config_key(r.params)] for r in rows if r.state == "complete")
        got[margin] = (len(rows), best / max(truth.values()), store.job(jid).stop_reason)
    assert got[0.03][0] < got[0.0][0], got
    assert got[0.03][1] >= 0.98, got
    assert "+3 % of its value" in got[0.03][2] and "% of its value" not in got[0.0][2]


def test_the_reason_reaches_jobs_and_report_json(tmp_path, db_url, capsys):
    store, jid, _ = _replay_job(tmp_path, db_url)
    assert cli.main(["jobs", "--json", "--db", db_url]) == 0
    (job,) = json.loads(capsys.readouterr().out)
    assert job["stop_reason"] == store.job(jid).stop_reason
    assert job["confirm_launches"] == 0 and job["engine_launches"] > 0
    assert cli.main(["report", str(jid), "--json", "--db", db_url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stop_reason"] == job["stop_reason"]
    assert cli.main(["report", str(jid), "--db", db_url]) == 0
    assert "Why the job stopped: nothing left can win" in capsys.readouterr().out


def _outlook(**kw) -> Outlook:
    base = dict(
        metric="output_tok_per_s",
        maximize=True,
        winner=3,
        bound=100.0,
        bound_how="2 launches, between-launch spread",
        priced=5,
        hopeful=(),
        unknown=(),
        top=90.0,
    )
    return Outlook(**{**base, **kw})


def test_the_outlook_says_what_can_still_win_and_why_not():
    c = Candidate({"method": "ngram", "num_speculative_tokens": 3}, 95.0, 120.0, "offline")
    assert not _outlook().can_win
    assert _outlook().reason() == (
        "nothing left can win: 5 configurations priced, best optimistic output_tok_per_s 90 "
        "< the winner's lower bound 100 (trial 3, 2 launches, between-launch spread)"
    )
    hopeful = _outlook(hopeful=(c,), top=120.0)
    assert hopeful.can_win and hopeful.best == c and hopeful.best_optimistic == 120.0
    assert not hopeful.predicted_to_beat(96.0) and hopeful.predicted_to_beat(94.0)
    unknown = _outlook(unknown=(Candidate({"method": "eagle"}, None, None, "no prediction"),))
    assert unknown.can_win and unknown.predicted_to_beat(1e9)
    assert "1 cannot be priced without a launch" in unknown.reason()
    assert _outlook(winner=None, bound=None).can_win


def test_a_bracket_is_predicted_to_beat_the_winner_at_its_good_end():
    """A depth bracketed by one launched depth (7 % of unknown split) predicted 95 in the
    middle: its expected gain reads it at 101.65, so the winner at 100 is not confirmed
    before it is launched (a winner it dethrones would have been confirmed for nothing)."""
    c = Candidate({"method": "mtp", "num_speculative_tokens": 2}, 95.0, 110.0, "depth model")
    bracketed = dataclasses.replace(c, bracket=0.07)
    assert not _outlook(hopeful=(c,)).predicted_to_beat(100.0)
    assert _outlook(hopeful=(bracketed,)).predicted_to_beat(100.0)
    assert not _outlook(hopeful=(bracketed,)).predicted_to_beat(102.0)
    low = _outlook(hopeful=(bracketed,), maximize=False)  # a latency: the good end is lower
    assert low.predicted_to_beat(89.0) and not low.predicted_to_beat(88.0)


def test_the_reason_names_the_proposers_priced_and_never_launched():
    names = tuple((f"draft_model draft=d{i}", 80.0 - i) for i in range(7))
    got = _outlook(unlaunched=(("eagle head=h", None), *names)).reason()
    assert got.endswith(
        "; priced and not launched: eagle head=h breaks the SLO, draft_model draft=d0 at best "
        "80, draft_model draft=d1 at best 79, draft_model draft=d2 at best 78, draft_model "
        "draft=d3 at best 77, draft_model draft=d4 at best 76 and 2 more"
    ), got


def test_the_winners_bound_is_its_expected_values_interval_over_launches():
    """exp(mean log - t(df) s / sqrt(n)): the interval of the winner's expected value, not
    of one more launch (a candidate competes with what the winner does on average)."""

    rep = _report(
        {
            "output_tok_per_s": 100.0,
            "launches": [{"output_tok_per_s": 98.0}, {"output_tok_per_s": 102.0}],
            "stats": {"output_tok_per_s": {"ci95_low": 90.0, "ci95_high": 110.0, "n": 3}},
        },
        {"output_tok_per_s": LaunchSpread(0.05, 4, 2)},
    )
    lo, how = winner_bound(rep, "output_tok_per_s", True)
    mean = (math.log(98.0) + math.log(102.0)) / 2
    assert lo == pytest.approx(math.exp(mean - t975(4) * 0.05 / math.sqrt(2)))
    assert how == "2 launches, between-launch spread"
    hi, _ = winner_bound(rep, "output_tok_per_s", False)
    assert hi == pytest.approx(math.exp(mean + t975(4) * 0.05 / math.sqrt(2)))
    rep = dataclasses.replace(rep, spreads={})  # nothing launched twice: its repeats' interval
    assert winner_bound(rep, "output_tok_per_s", True) == (90.0, "one launch's repeats")
    assert winner_bound(rep, "output_tok_per_s", False) == (110.0, "one launch's repeats")
    rep = _report({"output_tok_per_s": 100.0}, {})  # no repeats either: its value alone
    assert winner_bound(rep, "output_tok_per_s", True) == (100.0, "one launch, no interval")


def _report(metrics: dict, spreads: dict) -> Report:
    """A report whose winner measured ``metrics``, with the job's between-launch ``spreads``."""
    w = Point(1, "ngram", {}, {}, metrics, True, ())
    obj = [("output_tok_per_s", "maximize")]
    return Report(1, "w", 1, {}, obj, [w], [w], None, w, {}, {}, {}, spreads=spreads)


def test_before_a_relaunch_a_launch_moves_by_the_prior_or_its_repeats_whichever_is_more():
    """The noise the expected gain is discounted for: the job's between-launch spread once
    it has one, whatever the prior (a quiet host's measured 2 % replaces 10 % at once);
    before anything was launched twice, the space's stop_launch_noise (10 %) or what the
    winner's three repeats say its value moves by, whichever is more, not the repeats alone:
    a fresh demo whose repeats said less than its relaunches moved launched suffix k=8, 6, 3,
    4, 7, each depth next to the last worth a launch, before it relaunched anything."""

    rep = _report(
        {
            "output_tok_per_s": 300.0,
            "stats": {"output_tok_per_s": {"ci95_low": 280.0, "ci95_high": 320.0, "n": 3}},
        },
        {},
    )
    floor = math.log(320.0 / 280.0) / (2 * 1.96)  # about 3.4 %
    assert launch_noise(rep, "output_tok_per_s") == pytest.approx(floor)
    assert launch_noise(rep, "output_tok_per_s", 0.1) == pytest.approx(0.1)
    assert launch_noise(rep, "output_tok_per_s", 0.01) == pytest.approx(floor)
    rep = dataclasses.replace(rep, spreads={"output_tok_per_s": LaunchSpread(0.12, 2, 2)})
    assert launch_noise(rep, "output_tok_per_s", 0.1) == pytest.approx(0.12)
    rep = dataclasses.replace(rep, spreads={"output_tok_per_s": LaunchSpread(0.02, 1, 1)})
    assert launch_noise(rep, "output_tok_per_s", 0.1) == pytest.approx(0.02)
    rep = _report({"output_tok_per_s": 300.0}, {})  # one repeat: nothing to say
    assert launch_noise(rep, "output_tok_per_s") == 0.0
    assert launch_noise(rep, "output_tok_per_s", 0.1) == pytest.approx(0.1)
