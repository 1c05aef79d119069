"""bench/queueing.py: the space it runs (from the tiny CPU preset) and its per-class summary
on a replayed FAKE chain-model surface that queues (measured by nothing: this checks the
harness, not the machine)."""

from __future__ import annotations

import importlib.util

from tests.helpers import REPO
from tests.search.test_batches import _replay_job
from tuner.space import load_space


def _bench():
    spec = importlib.util.spec_from_file_location("queueing", REPO / "bench/queueing.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


qb = _bench()


def test_the_space_queues_at_the_objective_level_under_a_ttft_slo():
    preset = load_space(REPO / "search_spaces" / "tiny-cpu.yaml")
    space = qb.build_space(preset, trials=7, slo_ttft_ms=500)
    assert space.max_num_seqs == [2, 4] and space.concurrency == [1, 4]
    assert space.primary_concurrency == 4 and space.objective_max_num_seqs == 4
    assert space.slo.limits() == {"p99_ttft_ms": 500}
    assert space.methods.enabled() == ["ngram"] and space.start_with == []
    assert space.resolve(space.engine.model) == preset.resolve(preset.engine.model)
    assert space.measurement.confirm_top == 0


def test_the_summary_has_each_class_and_says_ttft_is_higher_at_2(tmp_path, db_url):
    store, jid = _replay_job(tmp_path, db_url, trials=5)
    out = qb.summarise(store, jid)
    assert set(out["classes"]) == {"2", "4"}
    two, four = out["classes"]["2"], out["classes"]["4"]
    assert two["baseline"]["mean_queue_ms"] > 0 and four["baseline"]["mean_queue_ms"] == 0
    assert two["winner"]["against_trial"] == two["baseline"]["trial"]
    assert out["queueing_as_expected"]["baseline"]["p99_ttft_higher_at_2"] is True
    assert out["queueing_as_expected"]["winner"]["mean_ttft_higher_at_2"] is True
