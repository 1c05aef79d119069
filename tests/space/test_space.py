from __future__ import annotations

from pathlib import Path

import pytest

from tuner.space import SearchSpace, SpaceError, load_space, loads_space

REPO = Path(__file__).resolve().parents[2]

MINIMAL = """
name: t
engine: {model: m}
methods: {ngram: {}}
"""


def test_preset_loads_and_resolves_paths_against_its_folder():
    space = load_space(REPO / "search_spaces" / "tiny-cpu-all-methods.yaml")
    assert " ".join(space.methods.enabled()) == "ngram draft_model eagle eagle3 mtp suffix medusa"
    assert space.resolve(space.engine.model) == str(REPO / "models" / "tiny" / "target")
    # Every checkpoint the preset names is committed.
    for path in (
        space.methods.eagle.heads[0],
        space.methods.eagle3.heads[0],
        space.methods.mtp.model,
        space.methods.draft_model.drafts[0],
        space.methods.medusa.heads[0],
    ):
        assert (Path(space.resolve(path)) / "model.safetensors").is_file()
    assert space.primary_concurrency == 1  # objective_concurrency
    assert space.engine.enforce_eager is True


def test_a_batch_size_below_the_concurrency_validates_and_queues():
    """max_num_seqs below a level: the engine runs that many and queues the rest, a batch
    class of its own (tuner.space._batch); the objective class is the one that queues least."""
    space = loads_space(MINIMAL + "max_num_seqs: [2]\nconcurrency: [4]\n")
    assert space.max_num_seqs == [2] and space.objective_max_num_seqs == 2
    two = loads_space(MINIMAL + "max_num_seqs: [2, 4, 8]\nconcurrency: [1, 4]\n")
    assert two.objective_max_num_seqs == 4
    desc = SearchSpace.model_fields["max_num_seqs"].description or ""
    assert "queues the rest" in desc and "own baseline" in desc


def test_defaults_fill_in():
    space = loads_space(MINIMAL)
    assert [o.metric for o in space.objectives] == ["output_tok_per_s", "p99_tpot_ms"]
    assert [o.resolved_direction for o in space.objectives] == ["maximize", "minimize"]
    assert space.workload.name == "code_completion"


@pytest.mark.parametrize(
    "yaml_text, field, reason",
    [
        (MINIMAL + "bogus: 1\n", "bogus", "Extra inputs are not permitted"),
        ("name: t\nmethods: {ngram: {}}\n", "engine", "Field required"),
        (
            MINIMAL.replace("{ngram: {}}", "{ngram: {num_speculative_tokens: {min: 4, max: 2}}}"),
            "methods.ngram.num_speculative_tokens",
            "max (2) is below min (4)",
        ),
        (MINIMAL.replace("{ngram: {}}", "{}"), "(top level)", "enable at least one"),
        (MINIMAL + "objectives: [{metric: speed}]\n", "objectives.0", "unknown metric 'speed'"),
        (MINIMAL + "slo: {p99_tpot_ms: -5}\n", "slo.p99_tpot_ms", "greater than 0"),
        (MINIMAL + "memory_fraction: [1.5]\n", "memory_fraction.0", "less than or equal to 1"),
        (MINIMAL + "concurrency: [2, 2]\n", "concurrency", "must not repeat"),
        (MINIMAL + "objective_concurrency: 3\n", "(top level)", "not one of concurrency"),
        (
            MINIMAL + "workload: {path: x.jsonl, builtin: chat}\n",
            "workload",
            "either builtin or path",
        ),
        (MINIMAL + "workload: {temperature: 0.5}\n", "workload.temperature", "Extra inputs"),
        (
            MINIMAL + "workload: {sampling: {top_p: 0.9}}\n",
            "workload.sampling",
            "top_p applies only",
        ),
        (
            MINIMAL + "workload: {sampling: {temperature: 3}}\n",
            "workload.sampling.temperature",
            "less than or equal to 2",
        ),
        (MINIMAL + 'workload: {name: "a b"}\n', "workload.name", "pattern"),
        (MINIMAL + "trials: 0\n", "trials", "greater than or equal to 1"),
    ],
)
def test_invalid_space_names_field_and_reason(yaml_text, field, reason):
    with pytest.raises(SpaceError) as ei:
        loads_space(yaml_text, source="x.yaml")
    msg = str(ei.value)
    assert f"  {field}: " in msg, msg
    assert reason in msg, msg


def test_not_yaml_and_not_mapping():
    with pytest.raises(SpaceError, match="not valid YAML"):
        loads_space("name: [unclosed")
    with pytest.raises(SpaceError, match="top level must be a mapping"):
        loads_space("- a\n- b\n")


def test_missing_file(tmp_path):
    with pytest.raises(SpaceError, match="cannot read search space"):
        load_space(tmp_path / "nope.yaml")


def test_start_with_is_checked_against_the_space():
    ok = loads_space(MINIMAL + "start_with: [{method: ngram, num_speculative_tokens: 2}]\n")
    assert ok.start_with[0].method == "ngram"
    with pytest.raises(SpaceError, match="start_with.0: method draft_model is not enabled"):
        loads_space(MINIMAL + "start_with: [{method: draft_model, num_speculative_tokens: 2}]\n")
    with pytest.raises(SpaceError, match="start_with.0: num_speculative_tokens 9 is outside"):
        loads_space(MINIMAL + "start_with: [{method: ngram, num_speculative_tokens: 9}]\n")


def test_a_workload_with_only_a_path_validates_and_is_named_after_its_file(tmp_path):
    """An explicit path replaces the default builtin set (no ``builtin: null`` needed)."""
    space = loads_space(MINIMAL + "workload: {path: prompts/my-set.jsonl}\n", base_dir=tmp_path)
    wl = space.workload
    assert (wl.builtin, wl.path, wl.name) == (None, "prompts/my-set.jsonl", "my-set")
    odd = loads_space(MINIMAL + "workload: {path: 'a b+c.jsonl'}\n", base_dir=tmp_path)
    assert odd.workload.name == "a_b_c"  # a name the API and --workload can carry


def test_the_same_prompts_as_two_named_workloads_with_their_own_sampling():
    space = loads_space(
        MINIMAL
        + "workloads:\n"
        + "  - {name: greedy, builtin: chat}\n"
        + "  - {name: sampled, builtin: chat, sampling: {temperature: 0.8, top_p: 0.95}}\n"
    )
    greedy, sampled = space.all_workloads
    assert (greedy.name, sampled.name) == ("greedy", "sampled")
    assert greedy.sampling.request() == {"temperature": 0.0}
    assert sampled.sampling.request() == {"temperature": 0.8, "top_p": 0.95}
    assert sampled.sampling.text() == "temperature 0.8, top-p 0.95"
    with pytest.raises(SpaceError, match="names must differ"):
        loads_space(MINIMAL + "workloads: [{builtin: chat}, {builtin: chat}]\n")
    # a stored space reads back with the same names and settings
    again = SearchSpace.model_validate(space.model_dump())
    assert [w.name for w in again.all_workloads] == ["greedy", "sampled"]
    assert again.all_workloads[1].sampling == sampled.sampling


def test_the_default_preset_searches_without_a_showcase():
    """make demo's space prices every method it holds and launches only what can win: no
    every-method start points (tiny-cpu-all-methods.yaml keeps those), the trials a cap."""
    space = load_space(REPO / "search_spaces" / "tiny-cpu.yaml")
    assert space.methods.enabled() == ["ngram", "draft_model", "eagle", "eagle3", "suffix"]
    assert space.start_with == [] and space.search == "guided" and space.offline_pricing
