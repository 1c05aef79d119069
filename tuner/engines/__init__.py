"""Engine backends. Only this package imports or launches an inference engine."""

from tuner.engines._base import FAIL_REASONS, EngineConfig, EngineLaunchError, FailReason
from tuner.engines._replay import ReplayEngine, ReplayMiss
from tuner.engines._sglang import (
    SGLANG_ALGORITHMS,
    SGLangServer,
    sglang_argv,
    sglang_cli,
    sglang_spec_flags,
)
from tuner.engines._vllm import (
    VLLMServer,
    build_argv,
    build_env,
    classify_failure,
    export_cli,
    free_port,
    speculative_json,
)

__all__ = [
    "FAIL_REASONS",
    "EngineConfig",
    "EngineLaunchError",
    "FailReason",
    "ReplayEngine",
    "ReplayMiss",
    "SGLANG_ALGORITHMS",
    "SGLangServer",
    "VLLMServer",
    "build_argv",
    "build_env",
    "classify_failure",
    "export_cli",
    "sglang_argv",
    "sglang_cli",
    "sglang_spec_flags",
    "free_port",
    "speculative_json",
]
