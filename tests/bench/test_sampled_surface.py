"""The recorded sampled surface (bench/surfaces/tiny-cpu-sampled.jsonl: the tiny pair on
vLLM's CPU build with SpecTune's expand fix, temperature 0.8 / top-p 0.95): its offline
table was priced on sampled outputs, and the guided search, pricing every proposer before a
launch, stops after the baseline and one speculative launch, where without the prices it
launches to learn."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.hpo._protocol import Truth, recommend
from bench.hpo._strategies import replay_space, run_spectune
from tuner.surface import read_surface

SURFACE = Path(__file__).resolve().parents[2] / "bench" / "surfaces" / "tiny-cpu-sampled.jsonl"


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth(read_surface(SURFACE))


def test_the_surface_samples_and_its_prices_were_made_on_sampled_outputs(truth: Truth) -> None:
    s = truth.surface
    assert not s.simulated
    assert s.space.all_workloads[0].sampling.temperature == 0.8
    table = s.header["offline_acceptance"]
    assert "sampled (temperature 0.8, top_p 0.95)" in table["basis"]
    assert "sampled" in table["how"] and not table["unpriced"]


def test_a_replay_searches_as_the_product_does_not_as_the_surface_was_recorded(
    truth: Truth,
) -> None:
    assert truth.surface.space.search == "sampler"  # every configuration as written
    assert replay_space(truth, name="t").search == "guided"
    assert replay_space(truth, name="t", search="sampler").search == "sampler"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_prices_end_the_search_in_three_launches(truth: Truth, seed: int) -> None:
    priced = run_spectune(truth, seed, budget=18, offline=True)
    blind = run_spectune(truth, seed, budget=18, offline=False)
    launched = [o for o in priced if o.launched]
    assert len(launched) <= 3
    # The answer is the true best (the baseline: nothing pays under sampling on 2 cores).
    assert truth.regret(recommend(priced, truth.sign)) == 0.0
    assert len([o for o in blind if o.launched]) > len(launched)
