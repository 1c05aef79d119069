"""The search: pruning by 95% intervals, and the search-efficiency benchmark, on a FAKE surface
(tests/fake_surface.py: a formula, not a measurement; the real surface is in bench/surfaces/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna
import pytest

from tests.fake_space import _space
from tests.helpers import fake_measurers, run_fake_job, trial_records
from tests.surface.fake_surface import SPACE, tok_per_s, write_fake_surface
from tuner.job import create_job, run_job
from tuner.search import dominated_by
from tuner.space import loads_space
from tuner.storage import Store, TrialModel

REPO = Path(__file__).resolve().parents[2]
OBJ = [("output_tok_per_s", "maximize"), ("p99_tpot_ms", "minimize")]


def _m(tps, lo, hi, p99, p_lo, p_hi):
    return {
        "output_tok_per_s": tps,
        "p99_tpot_ms": p99,
        "stats": {
            "output_tok_per_s": {"median": tps, "ci95_low": lo, "ci95_high": hi, "n": 3},
            "p99_tpot_ms": {"median": p99, "ci95_low": p_lo, "ci95_high": p_hi, "n": 3},
        },
    }


def test_dominated_only_beyond_both_intervals():
    slow = _m(50, 48, 52, 20, 19, 21)
    fast = _m(70, 68, 72, 14, 13, 15)
    assert dominated_by(slow, fast, OBJ)
    assert not dominated_by(fast, slow, OBJ)
    # Overlapping throughput intervals: not clearly worse, so not pruned.
    close = _m(66, 60, 69, 16, 15, 17)
    assert not dominated_by(close, fast, OBJ)
    # Faster but with a worse tail latency: a trade-off, not dominated.
    tradeoff = _m(60, 59, 61, 12, 11.5, 12.5)
    assert not dominated_by(tradeoff, fast, OBJ)
    # A single run has no interval: medians are compared.
    assert dominated_by({"output_tok_per_s": 50, "p99_tpot_ms": 20}, fast, OBJ)
    assert not dominated_by({"output_tok_per_s": 50}, fast, OBJ)  # missing metric: keep it


def _replay_space(tmp_path: Path, surface: Path, **over) -> object:
    text = SPACE.replace(
        "engine: {model: target, served_model_name: fake}",
        f"engine: {{kind: replay, surface: {surface}, model: target, served_model_name: fake}}",
    )
    space = loads_space(text, base_dir=tmp_path)
    data = space.model_dump(mode="json")
    data.update(over)
    return loads_space(json.dumps(data), base_dir=tmp_path)


def test_dominated_trial_is_pruned_with_evidence_and_its_repeat_costs_nothing(tmp_path, db_url):
    surface = write_fake_surface(tmp_path / "fake.jsonl")
    space = _replay_space(tmp_path, surface, trials=4)
    job_id = create_job(Store(db_url), space)
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    slow_ngram = {
        "method": "ngram",
        "ngram.num_speculative_tokens": 1,
        "ngram.prompt_lookup_min": 2,
        "ngram.prompt_lookup_max": 2,
        "max_num_seqs": 8,
        "memory_fraction": 0.1,
    }
    for p in (
        {"method": "none", "max_num_seqs": 4, "memory_fraction": 0.1},
        {
            "method": "draft_model",
            "draft_model.num_speculative_tokens": 3,
            "draft_model.draft": "draft",
            "max_num_seqs": 4,
            "memory_fraction": 0.1,
        },
        slow_ngram,
        slow_ngram,  # the sampler proposing it again
    ):
        study.enqueue_trial(p)
    run_job(Store(db_url), job_id, work_dir=tmp_path / "w")
    recs = trial_records(db_url, job_id)
    assert [r["state"] for r in recs] == ["complete", "complete", "pruned", "pruned"]
    pruned = recs[2]
    assert pruned["fail_reason"] == "pruned"
    ev = pruned["fail_detail"]
    assert ev.startswith("pruned after concurrency 1: output_tok_per_s 67.00 [66.33-67.67]")
    assert "dominated by trial 1 (output_tok_per_s 84.60" in ev  # the draft, not the baseline
    # Only the objective point was kept: the other level and the lossless check were skipped.
    assert [m["concurrency"] for m in pruned["measurements"]] == [1]
    assert recs[3]["reused_from"] == 2
    assert "same configuration as trial 2" in recs[3]["fail_detail"]
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    assert [t.state.name for t in study.trials][2:] == ["PRUNED", "PRUNED"]
    # The baseline is never pruned, however slow: it is the reference.
    assert recs[0]["method"] == "none" and recs[0]["state"] == "complete"
    assert tok_per_s({"method": "none", "max_num_seqs": 4}, 1) < 67.0


def test_pruning_can_be_turned_off(tmp_path, db_url):
    surface = write_fake_surface(tmp_path / "fake.jsonl")
    space = _replay_space(
        tmp_path,
        surface,
        trials=3,
        measurement={"repeats": 3, "confirm_top": 0, "prune": False},
        start_with=[
            {"method": "draft_model", "num_speculative_tokens": 3},
            {"method": "ngram", "num_speculative_tokens": 1},
        ],
    )
    job_id = create_job(Store(db_url), space)
    run_job(Store(db_url), job_id, work_dir=tmp_path / "w")
    with Store(db_url).session() as s:
        states = [r.state for r in s.query(TrialModel).filter_by(job_id=job_id)]
    assert states == ["complete"] * 3


def test_search_efficiency_benchmark_on_a_fake_surface(tmp_path, capsys, monkeypatch):
    surface = write_fake_surface(tmp_path / "fake.jsonl")
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    sys.modules.pop("search_efficiency", None)
    import search_efficiency

    strategies = "spectune,tpe,random,random_analytic,grid"
    argv = ["--surface", str(surface), "--seeds", "3", "--strategies", strategies]
    assert search_efficiency.main(argv) == 0
    out = capsys.readouterr().out
    final = json.loads(out.strip().splitlines()[-1])
    assert final["configurations"] == 42 and final["simulated"] is False
    assert set(final["strategies"]) == set(strategies.split(","))
    for row in final["strategies"].values():
        assert {"launches_to_success_median", "success_rate"} <= set(row)
    # The fake's best (draft k=3, batch 4) is a start point: the 3rd launch after the baseline
    # and the n-gram start point.
    assert final["strategies"]["spectune"]["launches_to_success_median"] == 3.0
    assert final["strategies"]["grid"]["launches_to_success_median"] > 3.0
    assert set(final["wilcoxon_p"]) == {"tpe", "random"}


def test_warm_start_enqueues_the_best_of_earlier_jobs_on_the_same_target(
    space_dir,
    db_url,
    fake_launcher,
):
    from tuner.candidates import config_to_params
    from tuner.context import JobContext
    from tuner.measure import JobControl
    from tuner.pareto import job_report
    from tuner.search import SearchStrategy

    def warm_start_params(url, job_id, space):
        ctx = JobContext(Store(url), job_id, space, space.trials, space_dir, JobControl())
        return SearchStrategy(ctx).warm_start_params()

    # Noise flags and pruning off: on a loaded machine the fake's timings can be flagged noisy
    # (infeasible), leaving a front of the baseline alone and nothing to hint.
    steady = {"repeats": 3, "confirm_top": 0, "max_relative_mad": 10, "prune": False}
    first_data = _space(space_dir, trials=4, confirm=0).model_dump(mode="json")
    first_data["measurement"] = steady
    first_space = loads_space(json.dumps(first_data), base_dir=space_dir)
    first = run_fake_job(db_url, first_space, space_dir / "w", fake_launcher)
    best = job_report(Store(db_url), first).front
    assert any(p.method != "none" for p in best)  # speculation commits more per fake step
    data = _space(space_dir, trials=2, confirm=0).model_dump(mode="json")
    data["measurement"] = steady
    data["warm_start"] = 1
    space = loads_space(json.dumps(data), base_dir=space_dir)
    second = create_job(Store(db_url), space)
    hint = warm_start_params(db_url, second, space)
    assert len(hint) == 1 and hint[0]["method"] != "none"
    run_job(
        Store(db_url), second, work_dir=space_dir / "w2", measurers=fake_measurers(fake_launcher)
    )
    recs = trial_records(db_url, second)
    assert recs[0]["method"] == "none"  # the baseline still comes first
    assert config_to_params(recs[1]["params"], space) == hint[0]
    # Another target (or a replay) is never a hint.
    other = data | {"engine": {**data["engine"], "model": "good_draft"}}
    assert warm_start_params(db_url, 999, loads_space(json.dumps(other), base_dir=space_dir)) == []
    # A configuration outside the new space is not enqueued.
    narrow = loads_space(json.dumps(data | {"max_num_seqs": [16]}), base_dir=space_dir)
    assert warm_start_params(db_url, 999, narrow) == []


def test_depth_schedule_when_the_best_depth_differs_by_concurrency(tmp_path, db_url, capsys):
    """On the fake surface drafts pay at concurrency 1 (best depth 3) and never at 4: the
    schedule turns speculation off from batch size 4, in vLLM's own format."""
    from tuner import cli
    from tuner.export import ExportError, depth_schedule, export_job
    from tuner.pareto import job_report

    surface = write_fake_surface(tmp_path / "fake.jsonl")
    space = _replay_space(
        tmp_path, surface, trials=5, measurement={"repeats": 3, "confirm_top": 0, "prune": False}
    )
    job_id = create_job(Store(db_url), space)
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    study.enqueue_trial({"method": "none", "max_num_seqs": 4, "memory_fraction": 0.1})
    for k in (1, 2, 3, 4):
        study.enqueue_trial(
            {
                "method": "draft_model",
                "draft_model.num_speculative_tokens": k,
                "draft_model.draft": "draft",
                "max_num_seqs": 4,
                "memory_fraction": 0.1,
            }
        )
    run_job(Store(db_url), job_id, work_dir=tmp_path / "w")
    rep = job_report(Store(db_url), job_id)
    assert rep.winner.params["num_speculative_tokens"] == 3
    assert depth_schedule(rep) == [[1, 3, 3], [4, 4, 0]]
    # The replay refuses to export; the same numbers in a measured job would export this:
    from tuner.export import export_point

    spec = json.loads(export_point(rep.winner, "vllm-schedule-json", rep))
    assert spec["num_speculative_tokens"] == 3
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 3, 3], [4, 4, 0]]
    with pytest.raises(ExportError, match="replayed"):
        export_job(Store(db_url), job_id, "vllm-schedule-json")
    dyn = pytest.importorskip("vllm.v1.spec_decode.dynamic.utils")
    parsed = dyn.validate_and_normalize_dynamic_sd_schedule(
        spec["num_speculative_tokens_per_batch_size"]
    )
    assert dyn.build_dynamic_sd_schedule_lookup(parsed, 4, 3)[1:] == [3, 3, 3, 0]
    capsys.readouterr()
    assert cli.main(["export", str(job_id), "--db", db_url, "--format", "vllm-schedule-json"]) != 0


def test_one_depth_best_everywhere_gives_no_schedule(tmp_path, db_url):
    from tuner.export import depth_schedule
    from tuner.pareto import job_report

    surface = write_fake_surface(tmp_path / "fake.jsonl")
    space = _replay_space(
        tmp_path,
        surface,
        trials=2,
        concurrency=[1],
        measurement={"repeats": 3, "confirm_top": 0, "prune": False},
    )
    job_id = create_job(Store(db_url), space)
    run_job(Store(db_url), job_id, work_dir=tmp_path / "w")  # baseline + the n-gram start point
    rep = job_report(Store(db_url), job_id)
    assert rep.winner is not None and rep.winner.method == "ngram"
    assert depth_schedule(rep) is None  # one level measured: nothing to schedule


def test_the_report_explains_the_winner(tmp_path, db_url):
    from tuner.explain import explain, param_importances
    from tuner.pareto import job_report

    surface = write_fake_surface(tmp_path / "fake.jsonl")
    space = _replay_space(
        tmp_path, surface, trials=6, measurement={"repeats": 3, "confirm_top": 0, "prune": False}
    )
    job_id = create_job(Store(db_url), space)
    run_job(Store(db_url), job_id, work_dir=tmp_path / "w")
    rep = job_report(Store(db_url), job_id)
    imp = param_importances(Store(db_url), job_id)
    # Six trials: too few distinct configurations for any ranking.
    assert 4 <= imp.n_configs < 10 and imp.shown == {}
    lines = explain(rep, imp)
    w = rep.winner
    assert w.method != "none"
    text = "\n".join(lines)
    assert f"accepted 50.0% of the {w.params['num_speculative_tokens']} drafted tokens" in text
    v = next(v for v in rep.verdicts[w.trial_number] if v.concurrency == 1)
    assert (
        f"{v.spec_ms_per_token:.2f} ms against the baseline's {v.baseline_ms_per_token:.2f}"
        in text
    )
    assert "It stops paying from concurrency 4" in text  # the fake never pays at 4
    assert f"cannot tell which parameter moved output_tok_per_s most ({imp.n_configs} " in text
    assert explain(rep)[-1].startswith("It stops paying")


def test_a_repeated_proposal_steers_the_next_trial_to_an_unmeasured_neighbour(tmp_path, db_url):
    surface = write_fake_surface(tmp_path / "fake.jsonl")
    space = _replay_space(
        tmp_path, surface, trials=4, measurement={"repeats": 3, "confirm_top": 0, "prune": False}
    )
    job_id = create_job(Store(db_url), space)
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    x = {
        "method": "draft_model",
        "draft_model.num_speculative_tokens": 3,
        "draft_model.draft": "draft",
        "max_num_seqs": 4,
        "memory_fraction": 0.1,
    }
    for p in ({"method": "none", "max_num_seqs": 4, "memory_fraction": 0.1}, x, x):
        study.enqueue_trial(p)
    run_job(Store(db_url), job_id, work_dir=tmp_path / "w")
    recs = trial_records(db_url, job_id)
    assert recs[2]["reused_from"] == 1
    nxt = recs[3]["params"]
    assert recs[3]["reused_from"] is None
    changed = {
        k for k in set(nxt) | set(recs[1]["params"]) if nxt.get(k) != recs[1]["params"].get(k)
    }
    assert len(changed) == 1, (nxt, recs[1]["params"])
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))


def _trials(values_of, reps=5, seed=0):
    """A balanced design (every combination ``reps`` times), so no parameter stands in for
    another by the luck of the draw."""
    import itertools
    import random

    import optuna

    rng = random.Random(seed)
    dists = {
        "method": optuna.distributions.CategoricalDistribution(["none", "ngram"]),
        "max_num_seqs": optuna.distributions.CategoricalDistribution([4, 8]),
        "memory_fraction": optuna.distributions.CategoricalDistribution([0.1, 0.2]),
    }
    trials, values = [], []
    for combo in itertools.product(*(d.choices for d in dists.values())):
        for _ in range(reps):
            p = dict(zip(dists, combo, strict=True))
            trials.append(optuna.trial.create_trial(params=p, distributions=dists, value=0.0))
            values.append(values_of(p, rng))
    return trials, values


def test_importance_is_shown_only_with_evidence():
    from tuner.explain import evidenced_importances

    # The method moves the objective a lot; batch size and memory do nothing.
    trials, values = _trials(lambda p, r: (80 if p["method"] == "ngram" else 60) + r.gauss(0, 1))
    imp = evidenced_importances(trials, values, "maximize")
    assert "method" in imp.shown and "max_num_seqs" not in imp.shown
    share, p = imp.shown["method"]
    assert 0 < share <= 1 and p < 0.05
    # Pure noise: nothing stands above the shuffled values.
    trials, values = _trials(lambda p, r: 60 + r.gauss(0, 5), seed=1)
    noise = evidenced_importances(trials, values, "maximize")
    assert noise.shown == {} and "shuffled" in noise.reason
    # Too few configurations: the reason says so.
    few = evidenced_importances(trials[:5], values[:5], "maximize")
    assert few.shown == {} and "at least 10" in few.reason
