"""Engine backends. Only this package imports or launches an inference engine, and only it
knows an engine's flags, endpoints, metric names and log lines.

May import from ``tuner``: ``tuner.metrics``, ``tuner.workloads``, ``tuner.stats`` only.
"""

from tuner.engines._args import DTYPES, SERVED_NAME_PATTERN, served_name_problem
from tuner.engines._base import (
    ADAPTIVE_STEPS,
    FAIL_REASONS,
    EngineConfig,
    EngineLaunchError,
    ExportUnsupported,
    FailReason,
    adaptive_refused,
)
from tuner.engines._exports import (
    EXPORT_FORMAT_NAMES,
    EXPORT_FORMATS,
    ExportFormat,
    render_export,
)
from tuner.engines._hosted import HostedServer
from tuner.engines._probe import EngineProbe, HostedProbe, fetch_metrics_text
from tuner.engines._process import ServerProcess, classify_failure, free_port, reap_stale
from tuner.engines._registry import (
    ENGINE_KINDS,
    ENGINES,
    METHOD_SPELLINGS,
    dtype_problem,
    extra_args_problems,
    server_class,
)
from tuner.engines._sglang import (
    SGLANG_ALGORITHMS,
    SGLANG_EXTRA_FLAGS,
    SGLangServer,
    sglang_adaptive_config,
    sglang_argv,
    sglang_cli,
    sglang_spec_flags,
)
from tuner.engines._sglang_probe import SGLangProbe, parse_sglang_spec_gauges, sglang_spec_stats
from tuner.engines._trtllm import TRTLLM_DECODING, trtllm_yaml
from tuner.engines._vllm import (
    VLLM_EXTRA_FLAGS,
    VLLM_METHODS,
    VLLMServer,
    build_argv,
    build_env,
    export_cli,
    is_speed_key,
    speculative_json,
    speed_env,
    suffix_trees_missing,
)
from tuner.engines._vllm_probe import (
    VLLMProbe,
    parse_kv_cache_tokens,
    parse_prefill_time,
    parse_queue_time,
    parse_spec_counters,
)
from tuner.engines._vllm_watch import (
    ServedModel,
    ServerSnapshot,
    parse_server_snapshot,
    read_server,
    served_models,
)

__all__ = [
    "reap_stale",
    "DTYPES",
    "ENGINES",
    "ENGINE_KINDS",
    "EXPORT_FORMATS",
    "EXPORT_FORMAT_NAMES",
    "FAIL_REASONS",
    "METHOD_SPELLINGS",
    "SGLANG_ALGORITHMS",
    "SGLANG_EXTRA_FLAGS",
    "SERVED_NAME_PATTERN",
    "TRTLLM_DECODING",
    "VLLM_EXTRA_FLAGS",
    "VLLM_METHODS",
    "suffix_trees_missing",
    "EngineConfig",
    "EngineLaunchError",
    "EngineProbe",
    "ExportFormat",
    "ExportUnsupported",
    "ADAPTIVE_STEPS",
    "adaptive_refused",
    "FailReason",
    "HostedProbe",
    "HostedServer",
    "SGLangProbe",
    "SGLangServer",
    "ServedModel",
    "ServerProcess",
    "ServerSnapshot",
    "VLLMProbe",
    "VLLMServer",
    "build_argv",
    "build_env",
    "classify_failure",
    "dtype_problem",
    "export_cli",
    "extra_args_problems",
    "is_speed_key",
    "fetch_metrics_text",
    "free_port",
    "parse_kv_cache_tokens",
    "parse_prefill_time",
    "parse_queue_time",
    "parse_sglang_spec_gauges",
    "parse_server_snapshot",
    "parse_spec_counters",
    "read_server",
    "served_models",
    "render_export",
    "served_name_problem",
    "server_class",
    "sglang_adaptive_config",
    "sglang_argv",
    "sglang_cli",
    "sglang_spec_flags",
    "sglang_spec_stats",
    "speculative_json",
    "speed_env",
    "trtllm_yaml",
]
