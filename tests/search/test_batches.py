"""Batch classes: max_num_seqs below the concurrency queues requests (tuner.space._batch).

The classes, the depth model with a queue wait (numbers worked by hand), the guide's
launches in each class on a FAKE chain-model surface that queues (tests/search/
chain_surface.py: measured by nothing), and the verdicts against each class's baseline.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.search.chain_surface import _metrics, point, trial_row, write_chain_surface
from tuner.job import create_job, run_job
from tuner.pareto import job_report
from tuner.search import DepthPoint, canonical, predict_depth
from tuner.search._depth import _scaled
from tuner.search._guide import depth_predictions
from tuner.search._layout import Layout
from tuner.space import batch_classes, loads_space, objective_max_num_seqs, parse_space
from tuner.storage import Store
from tuner.surface import read_surface

QUEUE_SPACE = """
name: queue-surface
engine: {model: target, served_model_name: fake}
methods:
  ngram:
    num_speculative_tokens: {min: 1, max: 4}
    prompt_lookup_min: {min: 1, max: 1}
    prompt_lookup_max: {min: 3, max: 3}
max_num_seqs: [2, 4]
memory_fraction: [0.4]
concurrency: [1, 4]
objective_concurrency: 4
workload: {builtin: code_completion, num_prompts: 4, max_tokens: 32}
measurement: {repeats: 3, confirm_top: 0}
slo: {p99_ttft_ms: 5000}
trials: 9
seed: 0
"""
NGRAM = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}


def test_values_with_the_same_running_batch_everywhere_are_one_class(tmp_path):
    assert batch_classes([2, 4, 8], [1, 4]) == [[2], [4, 8]]
    assert batch_classes([8, 16], [1, 4]) == [[8, 16]]  # both at least the top level
    assert objective_max_num_seqs([2, 4, 8], [1, 4], 4) == 4
    # 4 and 8 both run 4 at the objective level 4; 8 queues nothing at 8: it is the class
    assert objective_max_num_seqs([2, 4, 8, 16], [1, 4, 8], 4) == 8
    assert objective_max_num_seqs([2, 4], [1, 4], 1) == 4  # 1 at level 1 either way

    space = loads_space(QUEUE_SPACE.replace("[2, 4]", "[2, 4, 8]"), base_dir=tmp_path)
    c, why = canonical({**NGRAM, "max_num_seqs": 8, "memory_fraction": 0.4}, space, None, [])
    assert c["max_num_seqs"] == 4 and "1 at 1, 4 at 4" in why[0]
    # a different running batch at concurrency 4: a real axis, never collapsed
    two = {**NGRAM, "max_num_seqs": 2, "memory_fraction": 0.4}
    assert canonical(two, space, None, []) == (two, [])


def _anchor(queue: float | None) -> DepthPoint:
    """Depth 2 at a running batch of 2 under 4 clients: a service of 350 ms (30 prefill,
    32 tokens at 10 ms), queued as long again (q = (C/B - 1) * S)."""
    m = {
        "mean_itl_ms": 20.0,  # a step; tau 2, so TPOT 10 with no other wait
        "mean_tpot_ms": 10.0,
        "mean_acceptance_length": 2.0,
        "mean_ttft_ms": 380.0,
        "p99_ttft_ms": 400.0,
        "mean_e2e_ms": 700.0,
        "output_tok_per_s": 100.0,
    }
    if queue is not None:
        m["mean_queue_ms"] = queue
    return DepthPoint(7, 2, m)


def test_the_queue_wait_scales_with_the_service_time():
    """Depth 3 (tau 3) with a 24 ms step: TPOT 10 -> 8 (r_tpot 0.8). Service 30 + 320 ->
    30 + 256 = 286 ms, r_service = 286 / 350; the queue 350 -> 286 with it, so
    TTFT = 30 + 286 = 316, e2e = 700 * 286/350 = 572 (= 286 queued + 286 served), tok/s =
    100 * 350/286. Without the queue (old rule) TTFT stays 380 and e2e = 380 + 256 = 636."""
    acc = [0.5, 0.5, 1.0]
    out = _scaled(_anchor(350.0), acc, 3, 24.0, 20.0)
    assert out["mean_tpot_ms"] == pytest.approx(8.0)
    assert out["mean_ttft_ms"] == pytest.approx(316.0)
    assert out["p99_ttft_ms"] == pytest.approx(400.0 - 64.0)  # the mean's shift
    assert out["mean_e2e_ms"] == pytest.approx(572.0)
    assert out["mean_queue_ms"] == pytest.approx(286.0)
    assert out["output_tok_per_s"] == pytest.approx(100.0 * 350.0 / 286.0)
    old = _scaled(_anchor(None), acc, 3, 24.0, 20.0)
    assert old["mean_ttft_ms"] == pytest.approx(380.0)
    assert old["mean_e2e_ms"] == pytest.approx(636.0)
    assert _scaled(_anchor(0.0), acc, 3, 24.0, 20.0)["mean_e2e_ms"] == pytest.approx(636.0)


def test_predictions_at_a_batch_that_queues_are_exact_on_the_chain_model():
    """Two launched depths at max_num_seqs 2 under 4 clients: every depth's TTFT (queue
    included), end-to-end and tok/s as the closed-loop queue model gives them."""
    cfg = {**NGRAM, "max_num_seqs": 2, "memory_fraction": 0.4}
    pts = [DepthPoint(k, k, _metrics({**cfg, "num_speculative_tokens": k}, 4)) for k in (2, 6)]
    assert pts[0].metrics["mean_queue_ms"] > 0
    for k in (1, 3, 4, 5):
        pred = predict_depth(k, pts, None, "output_tok_per_s")
        truth = point({**cfg, "num_speculative_tokens": k}, 4)
        assert pred is not None
        for name in ("mean_ttft_ms", "mean_e2e_ms", "output_tok_per_s", "mean_queue_ms"):
            assert pred.metrics[name] == pytest.approx(truth[name], rel=1e-9), name


def _row(number: int, c: dict, state: str = "complete") -> SimpleNamespace:
    return trial_row(number, c, state, (1, 4))


def test_depth_models_never_mix_running_batches(tmp_path):
    """A launch at max_num_seqs 2 (a batch of 2 at the objective level 4) prices nothing in
    the objective class (4): neither the proposer's step cost nor the baseline."""
    space = loads_space(QUEUE_SPACE, base_dir=tmp_path)
    at = {
        2: {"max_num_seqs": 2, "memory_fraction": 0.4},
        4: {"max_num_seqs": 4, "memory_fraction": 0.4},
    }
    base2, base4 = {"method": "none", **at[2]}, {"method": "none", **at[4]}
    rows = [
        _row(0, base4),
        _row(1, base2),
        _row(2, {**NGRAM, **at[2], "num_speculative_tokens": 4}),
    ]
    lay = Layout.of(space, rows, lambda c: 0.4, None)
    assert lay.max_num_seqs == 4 and depth_predictions(space, rows, lay) == []
    rows.append(_row(3, {**NGRAM, **at[4], "num_speculative_tokens": 4}))
    lay = Layout.of(space, rows, lambda c: 0.4, None)
    preds = depth_predictions(space, rows, lay)
    assert {c["num_speculative_tokens"] for c, _ in preds} == {1, 2, 3}
    for c, p in preds:
        assert c["max_num_seqs"] == 4 and p.basis == (0, 3)  # never trial 1 or 2


def _replay_job(
    tmp_path: Path, db_url: str, trials: int, space_text: str = QUEUE_SPACE
) -> tuple[Store, int]:
    """A guided job replaying the FAKE chain surface of ``space_text``."""
    surface = write_chain_surface(tmp_path / "queue.jsonl", space_text)
    data = read_surface(surface).space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(surface)}
    data.update(trials=trials)
    store = Store(db_url)
    jid = create_job(store, parse_space(data, base_dir=tmp_path))
    run_job(store, jid, work_dir=tmp_path / "work")
    return store, jid


def test_the_guide_launches_the_baseline_and_the_winner_in_each_batch_class(tmp_path, db_url):
    """max_num_seqs [2, 4] at concurrency [1, 4], objective level 4: the guide searches at 4
    (the batch that queues nothing), then launches the baseline and the incumbent at 2, and
    each is compared with its own class's baseline."""
    store, jid = _replay_job(tmp_path, db_url, trials=9)
    rows = store.trials(jid)
    launched = [r for r in rows if r.reused_from is None and r.state in ("complete", "pruned")]
    by = [(r.search or {}).get("by") for r in rows]
    assert by[0] == "start" and rows[0].params["max_num_seqs"] == 4
    batch = [r for r in rows if (r.search or {}).get("by") == "guide: batch"]
    assert [r.params["method"] for r in batch] == ["none", "ngram"], by
    for r in batch:
        assert r.params["max_num_seqs"] == 2
        assert "a running batch of 2 at concurrency 4 -- requests queue" in r.search["why"]
    # a prediction made at the batch of 4 is never stored beside a launch at 2
    assert not any(
        (r.search or {}).get("predicted") for r in rows if r.params["max_num_seqs"] == 2
    )
    # the guide's own launches before them all ran at 4
    first_batch = rows.index(batch[0])
    assert all(r.params["max_num_seqs"] == 4 for r in rows[:first_batch])
    winner2 = batch[1]
    twin = next(
        r
        for r in launched
        if r.params["max_num_seqs"] == 4
        and {k: v for k, v in r.params.items() if k != "max_num_seqs"}
        == {k: v for k, v in winner2.params.items() if k != "max_num_seqs"}
    )
    rep = job_report(store, jid)
    base4, base2 = rows[0].number, batch[0].number
    assert rep.baseline is not None and rep.baseline.trial_number == base4
    assert rep.baselines.for_trial(winner2.number) == base2
    assert rep.baselines.for_trial(twin.number) == base4
    assert rep.baselines.all == [base4, base2]
    # at concurrency 4 the batch of 2 queues: TTFT higher, the verdict against base2
    m2, m4 = rep.measured[winner2.number][4], rep.measured[twin.number][4]
    assert m2["mean_ttft_ms"] > m4["mean_ttft_ms"] and m2["mean_queue_ms"] > 0
    v2 = next(v for v in rep.verdicts[winner2.number] if v.concurrency == 4)
    b2 = rep.measured[base2][4]
    assert v2.baseline_ms_per_token == pytest.approx(b2["mean_e2e_ms"] / (b2["output_tokens"] / 4))
    assert rep.latency_decides  # a TTFT SLO, and points that queued
