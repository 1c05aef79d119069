"""What a job may add to an engine's argv: allow-listed flags with checked values, known
dtypes, a plain served model name. Nothing a submitter writes may move the engine off
loopback, change its port or key, or replace the flags SpecTune sets itself."""

from __future__ import annotations

import pytest

from tuner.engines import (
    ENGINE_KINDS,
    EngineConfig,
    build_argv,
    dtype_problem,
    extra_args_problems,
    served_name_problem,
    sglang_argv,
)

# Flags SpecTune sets itself or that move the server: never a job's to pass.
FORBIDDEN = (
    "--host",
    "--port",
    "--api-key",
    "--model",
    "--model-path",
    "--served-model-name",
    "--speculative-config",
    "--speculative-algorithm",
    "--max-num-seqs",
    "--max-model-len",
    "--gpu-memory-utilization",
    "--dtype",
    "--trust-remote-code",
    "--uds",
    "--ssl-keyfile",
    "--allowed-origins",
)


@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_flags_that_move_or_replace_the_server_are_refused_in_every_form(kind: str):
    for flag in FORBIDDEN:
        for args in ([flag], [flag, "1"], [f"{flag}=1"], [f"{flag}=0.0.0.0"]):
            problems = extra_args_problems(kind, args)
            assert problems and problems[0][0] == 0, (kind, args)
            assert flag in problems[0][1]


def test_vllm_allow_list_with_values_checked():
    ok = [
        "--block-size",
        "16",
        "--max-num-batched-tokens=2048",
        "--enable-chunked-prefill",
        "--kv-cache-dtype",
        "fp8",
        "--seed",
        "7",
        "--swap-space",
        "0.5",
        "--disable-log-stats",
    ]
    assert extra_args_problems("vllm", ok) == []
    cases = {
        ("--block-size", "--host"): 1,  # a value that is a flag
        ("--block-size", "16 --host 0.0.0.0"): 1,
        ("--block-size",): 0,  # no value
        ("--disable-log-stats=1",): 0,  # a switch takes no value
        ("--kv-cache-dtype", "int4; rm"): 1,
        ("--seed", "-1"): 1,
        ("--swap-space", "nan"): 1,
        ("serve",): 0,  # positional: vllm serve's model
        ("-p", "9"): 0,  # short and abbreviated forms never pass
        ("--hos", "0.0.0.0"): 0,
        ("--block_size", "16"): 0,
        ("--seed", "1", "--port", "9"): 2,
    }
    for args, index in cases.items():
        problems = extra_args_problems("vllm", list(args))
        assert [i for i, _ in problems][:1] == [index], (args, problems)


def test_sglang_has_its_own_allow_list_and_none_lists_any_engine():
    assert extra_args_problems("sglang", ["--chunked-prefill-size", "512"]) == []
    assert extra_args_problems("sglang", ["--block-size", "16"])
    assert extra_args_problems("vllm", ["--chunked-prefill-size", "512"])
    # kind None (a replay of a recorded surface): the args of any one engine.
    assert extra_args_problems(None, ["--block-size", "16"]) == []
    assert extra_args_problems(None, ["--chunked-prefill-size", "512"]) == []
    assert extra_args_problems(None, ["--host", "0.0.0.0"])


def test_extra_args_lengths_are_bounded():
    assert extra_args_problems("vllm", ["--seed", "1" * 500])
    assert extra_args_problems("vllm", ["--" + "a" * 500])


@pytest.mark.parametrize("kind", [*ENGINE_KINDS, None])
def test_dtypes(kind: str | None):
    for ok in ("auto", "float16", "bfloat16", "float32", "half", "float"):
        assert dtype_problem(kind, ok) is None
    for bad in ("float16 --host 0.0.0.0", "--host", "int4", "", "FLOAT16"):
        assert dtype_problem(kind, bad) is not None


def test_served_model_name():
    for ok in ("target", "tiny-target", "Qwen3-0.6B", "org/model_v1.2", "a" * 128):
        assert served_name_problem(ok) is None
    for bad in ("", "-x", "--host", "a b", "a\n--port", "a" * 129, "/abs", "a=b", "x;y"):
        assert served_name_problem(bad) is not None


def test_allowed_args_reach_the_argv_as_given():
    cfg = EngineConfig(model="/m", dtype="bfloat16", extra_args=("--block-size", "16"))
    argv = build_argv(cfg, 8001, python="py")
    assert argv[-2:] == ["--block-size", "16"] and "--dtype" in argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert sglang_argv(cfg)[-2:] == ["--dtype", "bfloat16"]
