"""The report where batch size queues requests: each speculative configuration against its
own batch class's baseline, and TTFT / end-to-end / queue wait per level where they decide.
Jobs replay a FAKE chain-model surface (tests/search/chain_surface.py: measured by nothing).
"""

from __future__ import annotations

from types import SimpleNamespace

from tests.search.test_batches import QUEUE_SPACE, _replay_job
from tuner.baselines import Baselines, latency_decides, queued
from tuner.cli._render import report_text
from tuner.explain import explain
from tuner.pareto import job_report
from tuner.report import ReportQuery, pareto


def _r(number: int, method: str, seqs: int) -> SimpleNamespace:
    return SimpleNamespace(number=number, method=method, params={"max_num_seqs": seqs})


def test_each_trial_is_compared_with_its_batch_classes_baseline():
    rows = [_r(0, "none", 4), _r(1, "ngram", 4), _r(2, "ngram", 2), _r(3, "none", 2)]
    b = Baselines.of(rows, [1, 4], 4)
    assert b.main == 0 and b.all == [0, 3]
    assert b.for_trial(1) == 0 and b.for_trial(2) == 3
    assert b.same_batch(2, 4) is True
    # no baseline at 2: the main one, and each level says whether the batches still agree
    lone = Baselines.of(rows[:3], [1, 4], 4)
    assert lone.for_trial(2) == 0
    assert lone.same_batch(2, 1) is True and lone.same_batch(2, 4) is False
    # the main baseline is the objective class's even when another was launched first
    assert Baselines.of([_r(0, "none", 2), _r(1, "none", 4)], [1, 4], 4).main == 1


def test_latency_decides_when_the_slo_limits_it_or_a_point_queued():
    m = {"concurrency": 4, "mean_queue_ms": 0.0}
    assert not latency_decides({"p99_tpot_ms": 50}, {1: {4: m}}, {1: 4})
    assert latency_decides({"p99_ttft_ms": 500}, {1: {4: m}}, {1: 4})
    assert latency_decides({"p99_e2e_ms": 900}, {}, {})
    assert latency_decides({}, {1: {4: m}}, {1: 2})  # max_num_seqs 2 < concurrency 4
    assert queued({"concurrency": 1, "mean_queue_ms": 3.5}, 4)
    assert not queued({"concurrency": 1, "mean_queue_ms": None}, 4)
    # vLLM's own scheduling latency when nothing queues (measured: 0.03 ms) is no queue
    assert not queued({"concurrency": 4, "mean_queue_ms": 0.03}, 4)


def test_the_report_shows_ttft_e2e_and_queue_per_level_against_each_class(tmp_path, db_url):
    store, jid = _replay_job(tmp_path, db_url, trials=5)
    rows = store.trials(jid)
    base2 = next(
        r.number for r in rows if r.params["method"] == "none" and r.params["max_num_seqs"] == 2
    )
    spec2 = next(
        r.number for r in rows if r.params["method"] != "none" and r.params["max_num_seqs"] == 2
    )
    doc = pareto(store, jid, ReportQuery(workload=None, concurrency=None))
    assert doc.latency_decides and doc.baseline_trial == 0 and doc.baseline_trials == [0, base2]
    pt = next(p for p in doc.points if p.trial_number == spec2 and p.concurrency == 4)
    assert pt.queued and pt.running_batch == 2 and pt.baseline_trial == base2
    assert pt.mean_queue_ms and pt.mean_queue_ms > 0 and pt.mean_ttft_ms and pt.p99_e2e_ms
    low = next(p for p in doc.points if p.trial_number == spec2 and p.concurrency == 1)
    assert not low.queued and low.running_batch == 1
    rc = next(t for t in doc.round_cost if t.trial_number == spec2)
    assert rc.baseline_trial == base2 and all(v.same_running_batch for v in rc.verdicts)
    # the fields the report had keep their names
    dumped = doc.model_dump()
    assert {"baseline_trial", "winner_trial", "round_cost", "points"} <= set(dumped)
    text = report_text(job_report(store, jid))
    assert "TTFT and end-to-end per concurrency" in text and "c=4 queue ms" in text
    assert "(batch 2)" in text and f"seqs=2 vs base {base2}" in text


def test_no_latency_table_when_nothing_queued_and_the_slo_is_on_tpot(tmp_path, db_url):
    space = QUEUE_SPACE.replace("[2, 4]", "[4]").replace("p99_ttft_ms: 5000", "p99_tpot_ms: 60")
    store, jid = _replay_job(tmp_path, db_url, trials=3, space_text=space)
    rep = job_report(store, jid)
    assert not rep.latency_decides and rep.baselines.all == [0]
    assert "TTFT and end-to-end per concurrency" not in report_text(rep)
    assert not pareto(store, jid, ReportQuery(workload=None, concurrency=None)).latency_decides


def test_a_winner_that_queues_says_what_queued_and_which_baseline(tmp_path, db_url):
    """Minimising p99 TPOT, the batch of 2 wins at concurrency 4 (smaller steps); the
    explanation says it queued and that its verdict is against the baseline at 2."""
    objectives = "objectives: [{metric: p99_tpot_ms}, {metric: output_tok_per_s}]\n"
    store, jid = _replay_job(tmp_path, db_url, trials=8, space_text=QUEUE_SPACE + objectives)
    rep = job_report(store, jid)
    assert rep.winner is not None and rep.winner.params["max_num_seqs"] == 2
    base2 = rep.baselines.for_trial(rep.winner.trial_number)
    assert base2 != rep.baselines.main
    text = " ".join(explain(rep))
    assert "the engine ran 2 requests at once (max_num_seqs 2) and queued the rest" in text
    assert f"against trial {base2}, the baseline at the same batch" in text
