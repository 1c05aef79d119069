"""The structure-aware search: depth predictions, classes of equivalent configurations, the
guide's order, and a guided job on a FAKE chain-model surface (tests/search/chain_surface.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.search.chain_surface import (
    NEED,
    SPACE,
    _metrics,
    point,
    trial_row,
    write_chain_surface,
)
from tuner.job import create_job, run_job
from tuner.measure import load_all_prompts
from tuner.search import DepthPoint, canonical, kv_need_tokens, predict_depth, propose, tau
from tuner.search._depth import fixed_share_of
from tuner.space import loads_space
from tuner.storage import Store
from tuner.surface import config_key, grid_configs, read_surface


def _dp(trial: int, c: dict, level: int = 4) -> DepthPoint:
    return DepthPoint(trial, int(c.get("num_speculative_tokens") or 0), _metrics(c, level))


BASE = {"method": "none", "max_num_seqs": 4, "memory_fraction": 0.4}
NGRAM = {
    "method": "ngram",
    "prompt_lookup_min": 1,
    "prompt_lookup_max": 3,
    "max_num_seqs": 4,
    "memory_fraction": 0.4,
}
DRAFT = {"method": "draft_model", "draft": "draft-a", "max_num_seqs": 4, "memory_fraction": 0.4}


def test_tau_is_one_plus_the_accepted_positions():
    assert tau([0.8, 0.5, 0.2], 0) == 1.0
    assert tau([0.8, 0.5, 0.2], 2) == pytest.approx(2.3)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_one_launch_and_the_baseline_bracket_every_depth(k, method):
    """One launched depth: the step cost's split into fixed and per-token parts is unknown,
    so the prediction is the middle of the two extremes and its band holds the truth (the
    FAKE surface's n-gram step is nearly all per token, the draft model's partly fixed)."""
    cfg = {**(NGRAM if method == "ngram" else DRAFT)}
    deep = _dp(2, {**cfg, "num_speculative_tokens": 6})
    pred = predict_depth(k, [deep], _dp(1, BASE), "output_tok_per_s")
    truth = point({**cfg, "num_speculative_tokens": k}, 4)
    assert pred is not None and pred.depth == k
    got = pred.metrics["output_tok_per_s"]
    assert abs(got - truth["output_tok_per_s"]) <= got * pred.rel_sigma
    assert pred.metrics["mean_acceptance_length"] == pytest.approx(truth["tau"])
    assert pred.basis == (1, 2) and pred.anchor == 2


def test_another_proposer_of_the_method_tells_the_fixed_share():
    """draft-a launched at two depths gives the method's fixed share of a step; draft-b,
    launched once, is then priced exactly (both drafts share the step formula here)."""
    a = [
        _dp(2, {**DRAFT, "num_speculative_tokens": 6}),
        _dp(3, {**DRAFT, "num_speculative_tokens": 2}),
    ]
    phi = fixed_share_of(a, _dp(1, BASE))
    assert phi is not None and 0 < phi < 1
    b = {**DRAFT, "draft": "draft-b"}
    deep_b = _dp(4, {**b, "num_speculative_tokens": 6})
    for k in (1, 3, 5):
        pred = predict_depth(k, [deep_b], _dp(1, BASE), "output_tok_per_s", fixed_share=phi)
        truth = point({**b, "num_speculative_tokens": k}, 4)["output_tok_per_s"]
        assert pred is not None and pred.metrics["output_tok_per_s"] == pytest.approx(truth)


def test_two_launched_depths_fit_a_draft_models_own_step_cost_exactly():
    pts = [
        _dp(2, {**DRAFT, "num_speculative_tokens": 6}),
        _dp(3, {**DRAFT, "num_speculative_tokens": 2}),
    ]
    for k in (1, 3, 4, 5):
        pred = predict_depth(k, pts, _dp(1, BASE), "output_tok_per_s")
        truth = point({**DRAFT, "num_speculative_tokens": k}, 4)
        assert pred is not None
        assert pred.metrics["output_tok_per_s"] == pytest.approx(
            truth["output_tok_per_s"], rel=1e-9
        )
        assert pred.metrics["mean_tpot_ms"] == pytest.approx(truth["mean_tpot_ms"], rel=1e-9)
        assert pred.metrics["mean_itl_ms"] == pytest.approx(truth["mean_itl_ms"], rel=1e-9)


def test_no_prediction_beyond_the_measured_positions_or_without_a_step_cost():
    shallow = _dp(2, {**DRAFT, "num_speculative_tokens": 2})
    assert predict_depth(4, [shallow], _dp(1, BASE), "output_tok_per_s") is None
    assert predict_depth(1, [shallow], None, "output_tok_per_s") is None  # one depth, no k=0
    assert predict_depth(1, [], _dp(1, BASE), "output_tok_per_s") is None


def test_the_band_widens_with_distance_and_the_jobs_own_errors():
    deep = _dp(2, {**DRAFT, "num_speculative_tokens": 6})
    near = predict_depth(5, [deep], _dp(1, BASE), "output_tok_per_s")
    far = predict_depth(1, [deep], _dp(1, BASE), "output_tok_per_s")
    cal = predict_depth(1, [deep], _dp(1, BASE), "output_tok_per_s", calibration=0.1)
    assert near and far and cal
    assert near.rel_sigma < far.rel_sigma < cal.rel_sigma


def _space(tmp_path: Path):
    return loads_space(SPACE, base_dir=tmp_path)


def test_kv_need_is_concurrency_times_the_longest_request_capped_by_the_model(tmp_path):
    space = _space(tmp_path)
    assert kv_need_tokens(space, load_all_prompts(space)) == NEED == 4 * 512


def test_batch_sizes_collapse_to_the_smallest(tmp_path):
    space = _space(tmp_path)
    c, why = canonical({**BASE, "max_num_seqs": 16}, space, NEED, [])
    assert c["max_num_seqs"] == 4 and "same batch at every concurrency level" in why[0]
    assert "1 at 1, 4 at 4" in why[0]
    same, none = canonical(BASE, space, NEED, [])
    assert same == BASE and none == []


def test_memory_collapses_only_where_a_launch_held_the_workload(tmp_path):
    space = _space(tmp_path)
    ngram = {
        "method": "ngram",
        "num_speculative_tokens": 2,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
        "max_num_seqs": 4,
    }
    held = [({**ngram, "memory_fraction": 0.2}, NEED + 100)]
    short = [({**ngram, "memory_fraction": 0.1}, NEED - 1)]
    up, why = canonical({**ngram, "memory_fraction": 0.4}, space, NEED, held)
    assert up["memory_fraction"] == 0.2 and "changes nothing" in why[0]
    down, why = canonical({**ngram, "memory_fraction": 0.1}, space, NEED, held)
    assert down["memory_fraction"] == 0.2 and "cannot be faster" in why[0]
    kept, why = canonical({**ngram, "memory_fraction": 0.4}, space, NEED, short)
    assert kept["memory_fraction"] == 0.4 and why == []
    # A draft model's weights take memory: the n-gram launch says nothing about it.
    other, why = canonical({**DRAFT, "num_speculative_tokens": 2}, space, NEED, held)
    assert other["memory_fraction"] == 0.4 and why == []
    assert (
        canonical({**ngram, "memory_fraction": 0.4}, space, None, held)[0]["memory_fraction"]
        == 0.4
    )


def _row(number, c, state="complete", level=4):
    return trial_row(number, c, state, (level,))


def test_the_guide_scans_one_proposer_of_each_method_first_in_prior_order(tmp_path):
    space = _space(tmp_path)
    rows = [_row(0, BASE)]
    seen = []
    for n in range(1, 4):
        prop = propose(space, rows, lambda c: 0.4)
        assert prop is not None and prop.by == "guide: scan"
        assert prop.params["num_speculative_tokens"] == 6 and prop.params["max_num_seqs"] == 4
        seen.append(prop.params["method"])
        rows.append(_row(n, prop.params))
    assert seen == ["eagle", "draft_model", "ngram"]


def test_the_guide_exploits_a_confident_prediction_before_scanning_on(tmp_path, monkeypatch):
    from tests.search import chain_surface

    # Acceptance collapses after two positions and depth is dear: k=6 is clearly poor. Two
    # launched depths fix the step cost's line, so the gain is confident.
    monkeypatch.setitem(chain_surface.STEP, "eagle", (10.6, 4.0))
    monkeypatch.setitem(chain_surface.ACCEPT, "head", [0.95, 0.9, 0.05, 0.03, 0.02, 0.01])
    space = _space(tmp_path)
    head = {"method": "eagle", "head": "head", "max_num_seqs": 4, "memory_fraction": 0.4}
    rows = [
        _row(0, BASE),
        _row(1, {**head, "num_speculative_tokens": 6}),
        _row(2, {**head, "num_speculative_tokens": 5}),
    ]
    prop = propose(space, rows, lambda c: 0.4)
    truth = {
        k: point({**head, "num_speculative_tokens": k}, 4)["output_tok_per_s"] for k in range(1, 7)
    }
    best_k = max(truth, key=truth.get)
    assert truth[best_k] > 1.3 * truth[6], "the deepest launch must be clearly worse"
    assert prop is not None and prop.by == "guide: depth"
    assert prop.params["num_speculative_tokens"] == best_k
    pred = prop.predicted
    assert pred["objective"] == "output_tok_per_s" and pred["basis"] == [0, 1, 2]
    assert pred["value"] == pytest.approx(truth[best_k], rel=0.03)


def test_the_guide_goes_silent_when_everything_is_launched(tmp_path):
    space = loads_space(SPACE.replace("max: 6}", "max: 1}"), base_dir=tmp_path)
    rows = [_row(0, BASE)] + [
        _row(i + 1, {**c, "max_num_seqs": 4, "memory_fraction": 0.4})
        for i, c in enumerate(grid_configs(space))
        if c["method"] != "none" and c["max_num_seqs"] == 4 and c["memory_fraction"] == 0.4
    ]
    assert propose(space, rows, lambda c: 0.4) is None


def test_a_guided_job_finds_the_best_class_in_few_launches(tmp_path, db_url):
    """279 configurations; the guide should reach the best one's class in well under a
    tenth of them, say so per trial, and never store a prediction as a measurement."""
    surface = write_chain_surface(tmp_path / "chain.jsonl")
    space = read_surface(surface).space
    data = space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(surface)}
    # No stop margin: the true best (ngram k=4, 306.7) is 1.3 % above the scan's k=6, a gain
    # the default 3 % margin calls the winner's; here the guide must still tell them apart.
    # A replay answers each launch with the one recorded point and confirmation is off, so no
    # launch noise is assumed (the 10 % default would call a 1.3 % gain a near tie).
    data.update(trials=16, stop_margin=0.0, stop_launch_noise=0.0)
    from tuner.space import parse_space

    job_space = parse_space(data, base_dir=tmp_path)
    store = Store(db_url)
    jid = create_job(store, job_space)
    run_job(store, jid, work_dir=tmp_path / "work")
    truth = {config_key(c): point(c, 4)["output_tok_per_s"] for c in grid_configs(space)}
    best = max(truth.values())
    assert len(truth) == 279
    rows = store.trials(jid)
    launched = [r for r in rows if r.reused_from is None and r.state == "complete"]
    first = next(
        i for i, r in enumerate(launched, 1) if truth[config_key(r.params)] >= best * 0.999
    )
    assert first <= 8, [(r.number, r.params, (r.search or {}).get("by")) for r in launched]
    by = [(r.search or {}).get("by") for r in rows]
    assert by[0] == "start" and "guide: scan" in by
    # a depth the depth model priced, proposed as the best depth or as what can still win
    whys = [str((r.search or {}).get("why") or "") for r in rows]
    assert "guide: depth" in by or any(
        b == "guide: can win" and "(depth model)" in w for b, w in zip(by, whys, strict=True)
    ), list(zip(by, whys, strict=True))
    for r in rows:
        pred = (r.search or {}).get("predicted")
        for m in r.measurements:
            # the measurement is the surface's row, untouched by the prediction
            assert m.metrics["output_tok_per_s"] == pytest.approx(
                truth[config_key(r.params)]
                if m.concurrency == 4
                else m.metrics["output_tok_per_s"]
            )
            assert "predicted" not in m.metrics
        if pred is not None:
            assert r.state in ("complete", "pruned") and pred["basis"]
    # every launched configuration uses the smallest batch size: the others are one class
    assert {r.params["max_num_seqs"] for r in launched} == {4}
    json.dumps([r.search for r in rows])  # stored as plain JSON


def test_any_launch_of_a_launched_proposer_is_priced_before_it_runs(tmp_path, db_url):
    """Whoever proposes it (the guide, the sampler, a neighbour move), a depth of a proposer
    already launched gets the depth model's prediction stored with it; a proposer never
    launched gets none."""
    from tuner.context import JobContext
    from tuner.search import SearchStrategy
    from tuner.space import parse_space

    surface = write_chain_surface(tmp_path / "chain.jsonl")
    space = read_surface(surface).space
    data = space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(surface)}
    data.update(trials=2)  # the baseline and the first scan (EAGLE at k=6)
    job_space = parse_space(data, base_dir=tmp_path)
    store = Store(db_url)
    jid = create_job(store, job_space)
    run_job(store, jid, work_dir=tmp_path / "work")
    strategy = SearchStrategy(JobContext.reading(store, jid))
    head = {"method": "eagle", "head": "head", "max_num_seqs": 4, "memory_fraction": 0.4}
    pred = strategy.prediction_for({**head, "num_speculative_tokens": 3})
    assert pred is not None and pred["objective"] == "output_tok_per_s" and pred["basis"] == [0, 1]
    draft = {
        "method": "draft_model",
        "draft": "draft-a",
        "max_num_seqs": 4,
        "memory_fraction": 0.4,
    }
    assert strategy.prediction_for({**draft, "num_speculative_tokens": 3}) is None
    assert (
        strategy.prediction_for({"method": "none", "max_num_seqs": 4, "memory_fraction": 0.4})
        is None
    )


def test_the_prediction_error_is_against_the_launch_it_was_made_for():
    """A confirmed trial's numbers are the second launch's; its prediction was made for the
    first, which the confirmation keeps under ``search``."""
    from tuner.storage import TrialRecord

    pred = {"objective": "output_tok_per_s", "value": 168.9, "rel_sigma": 0.2}
    common = dict(number=3, state="complete", method="draft_model", params={}, concurrency=1)
    confirmed = TrialRecord(
        **common,
        workload="w",
        metrics={"output_tok_per_s": 127.1, "search": {"output_tok_per_s": 196.7}},
        search={"by": "guide: depth", "predicted": pred},
    )
    assert confirmed.prediction_error_pct == pytest.approx(100 * (196.7 - 168.9) / 168.9)
    plain = confirmed.model_copy(update={"metrics": {"output_tok_per_s": 150.0}})
    assert plain.prediction_error_pct == pytest.approx(100 * (150.0 - 168.9) / 168.9)
    failed = confirmed.model_copy(update={"state": "fail"})
    assert failed.prediction_error_pct is None
    assert confirmed.model_copy(update={"search": {"by": "sampler"}}).prediction_error_pct is None
