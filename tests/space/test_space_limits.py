"""Pathological search spaces are refused with a SpaceError naming the field, never a crash:
deep or huge YAML, non-finite numbers, out-of-range seeds and depths, engine argv injection."""

from __future__ import annotations

import pytest

from tuner.space import MAX_SPACE_BYTES, MAX_SPACE_DEPTH, SpaceError, loads_space, parse_space

MINIMAL = """
name: t
engine: {model: m}
methods: {ngram: {}}
"""


def _space(**over: object) -> dict:
    return {"name": "t", "engine": {"model": "m"}, "methods": {"ngram": {}}, **over}


def _engine(**over: object) -> dict:
    return _space(engine={"model": "m", **over})


def test_yaml_nested_deeper_than_any_space_is_refused_without_recursion():
    for text in ("[" * 50_000, "a:\n" + "".join(f"{' ' * i}b:\n" for i in range(1, 400))):
        with pytest.raises(SpaceError, match=rf"nested deeper than {MAX_SPACE_DEPTH}"):
            loads_space(text, source="deep.yaml")


def test_a_mapping_nested_deeper_than_any_space_is_refused_without_recursion():
    deep: object = 1
    for _ in range(5_000):
        deep = {"a": deep}
    with pytest.raises(SpaceError, match=rf"nested deeper than {MAX_SPACE_DEPTH}"):
        parse_space(_space(x=deep))


def test_yaml_larger_than_the_limit_is_refused_before_parsing():
    text = MINIMAL + "# " + "x" * MAX_SPACE_BYTES + "\n"
    with pytest.raises(SpaceError, match=rf"over {MAX_SPACE_BYTES} bytes"):
        loads_space(text, source="big.yaml")
    assert loads_space(MINIMAL).name == "t"  # a normal file is untouched


def test_non_finite_numbers_are_refused_by_field():
    cases = {
        "slo.p99_tpot_ms": MINIMAL + "slo: {p99_tpot_ms: .nan}\n",
        "memory_fraction.0": MINIMAL + "memory_fraction: [.inf]\n",
        "start_with.0.memory_fraction": MINIMAL
        + "start_with: [{method: ngram, num_speculative_tokens: 1, memory_fraction: .nan}]\n",
    }
    for field, text in cases.items():
        with pytest.raises(SpaceError, match=rf"{field}: Input should be a finite number"):
            loads_space(text)


@pytest.mark.parametrize("seed", [-1, 2**32, 10**30])
def test_seed_outside_32_bits_is_refused(seed: int):
    with pytest.raises(SpaceError, match=r"\n  seed: "):
        parse_space(_space(seed=seed))
    assert parse_space(_space(seed=2**32 - 1)).seed == 2**32 - 1


def test_depths_and_lookups_are_bounded_by_field():
    big = {"min": 1, "max": 10**9}
    for method, field in (
        ({"ngram": {"num_speculative_tokens": big}}, "methods.ngram.num_speculative_tokens.max"),
        ({"ngram": {"prompt_lookup_max": big}}, "methods.ngram.prompt_lookup_max.max"),
        (
            {"draft_model": {"num_speculative_tokens": big, "drafts": ["d"]}},
            "methods.draft_model.num_speculative_tokens.max",
        ),
    ):
        with pytest.raises(SpaceError, match=rf"{field}: Input should be less than or equal"):
            parse_space(_space(methods=method))
    start = [{"method": "ngram", "num_speculative_tokens": 10**9}]
    with pytest.raises(SpaceError, match=r"start_with.0.num_speculative_tokens: Input should"):
        parse_space(_space(start_with=start))
    with pytest.raises(SpaceError, match=r"objective_concurrency: Input should"):
        parse_space(_space(objective_concurrency=10**12))


def test_engine_extra_args_outside_the_allow_list_are_refused_by_index():
    with pytest.raises(SpaceError) as e:
        parse_space(_engine(extra_args=["--block-size", "16", "--host", "0.0.0.0"]))
    msg = str(e.value)
    assert "engine.extra_args.2: " in msg and "--host" in msg
    assert "engine.extra_args.0" not in msg and "engine.extra_args.3" not in msg
    for bad, index in (
        (["--host=0.0.0.0"], 0),
        (["--block-size", "--host"], 1),
        (["--block-size=16 --host 0.0.0.0"], 0),
        (["--speculative-config", "{}"], 0),
        (["--api-key", "k"], 0),
        (["serve"], 0),
        (["-h"], 0),
        (["--disable-log-stats=--port"], 0),
    ):
        with pytest.raises(SpaceError, match=rf"engine.extra_args.{index}: "):
            parse_space(_engine(extra_args=bad))
    ok = ["--block-size", "16", "--max-num-batched-tokens=2048", "--disable-log-stats"]
    assert parse_space(_engine(extra_args=ok)).engine.extra_args == ok


def test_each_engine_has_its_own_flags_and_replay_takes_any_engines():
    sglang = ["--chunked-prefill-size", "512"]
    assert parse_space(_engine(kind="sglang", extra_args=sglang)).engine.extra_args == sglang
    with pytest.raises(SpaceError, match=r"engine.extra_args.0: "):
        parse_space(_engine(kind="sglang", extra_args=["--block-size", "16"]))
    replay = _engine(kind="replay", surface="s.jsonl", extra_args=["--block-size", "16"])
    assert parse_space(replay).engine.extra_args == ["--block-size", "16"]
    with pytest.raises(SpaceError, match=r"engine.extra_args.0: "):
        parse_space(_engine(kind="replay", surface="s.jsonl", extra_args=["--host", "x"]))


def test_engine_dtype_and_served_model_name_are_validated():
    with pytest.raises(SpaceError, match=r"engine.dtype: "):
        parse_space(_engine(dtype="float16 --host 0.0.0.0"))
    assert parse_space(_engine(dtype="bfloat16")).engine.dtype == "bfloat16"
    for bad in ("--host", "a b", "", "x" * 200, "name\n--port"):
        with pytest.raises(SpaceError, match=r"engine.served_model_name: "):
            parse_space(_engine(served_model_name=bad))
    for good in ("tiny-target", "fake", "Qwen3-0.6B", "org/model_v1.2"):
        assert parse_space(_engine(served_model_name=good)).engine.served_model_name == good


def test_space_error_carries_structured_locations():
    with pytest.raises(SpaceError) as e:
        parse_space(_space(**{"¹": 1, "a.b": 2, "concurrency": [0]}))
    locs = {loc for loc, _ in e.value.errors}
    assert {("¹",), ("a.b",), ("concurrency", 0)} <= locs
