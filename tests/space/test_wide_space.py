"""The wide surface's space is what the search issue asks a real surface to cover."""

from __future__ import annotations

from tests.helpers import REPO
from tuner.candidates import grid_configs
from tuner.space import load_space


def test_the_wide_space_covers_every_method_depth_batch_and_level():
    space = load_space(REPO / "search_spaces" / "wide-cpu.yaml")
    grid = grid_configs(space)
    assert len(grid) >= 100
    assert {c["method"] for c in grid} == {
        "none",
        "ngram",
        "draft_model",
        "eagle",
        "eagle3",
        "mtp",
    }
    depths = {c["num_speculative_tokens"] for c in grid if c["method"] in ("ngram", "eagle")}
    assert depths == set(range(1, 9))
    assert len(space.max_num_seqs) == 2 and space.concurrency == [1, 4, 16]
    assert space.measurement.repeats >= 5
    assert min(space.max_num_seqs) >= max(space.concurrency)
    assert all(w.num_prompts >= max(space.concurrency) for w in space.all_workloads)
