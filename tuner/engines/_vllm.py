"""vLLM backend: the argv and environment of one candidate's ``vllm serve``, and the exported
command line. The process lifecycle is ``ServerProcess``'s; what the server reports is
``VLLMProbe``'s.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from tuner.engines._args import FlagValue
from tuner.engines._base import EngineConfig
from tuner.engines._probe import EngineProbe
from tuner.engines._process import ServerProcess
from tuner.engines._vllm_probe import VLLMProbe

__all__ = [
    "VLLM_EXTRA_FLAGS",
    "VLLM_METHODS",
    "VLLMServer",
    "build_argv",
    "build_env",
    "export_cli",
    "speculative_json",
]

_MODULE = "vllm.entrypoints.openai.api_server"

# vLLM spells each method as SpecTune does (``speculative_config.method``).
VLLM_METHODS = {m: m for m in ("ngram", "draft_model", "eagle", "eagle3", "mtp")}

# The flags a job's ``engine.extra_args`` may pass to vLLM: scheduling, KV cache and logging
# knobs. Never what moves or exposes the server (host, port, key, origins, TLS, sockets),
# what SpecTune sets itself (model, name, dtype, the searched parameters, speculative config)
# or what runs code from the checkpoint (trust-remote-code).
VLLM_EXTRA_FLAGS: Mapping[str, FlagValue] = {
    "--block-size": "int",
    "--max-num-batched-tokens": "int",
    "--max-num-partial-prefills": "int",
    "--long-prefill-token-threshold": "int",
    "--enable-chunked-prefill": None,
    "--no-enable-chunked-prefill": None,
    "--enable-prefix-caching": None,
    "--no-enable-prefix-caching": None,
    "--kv-cache-dtype": frozenset({"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}),
    "--seed": "int",
    "--swap-space": "number",
    "--cpu-offload-gb": "number",
    "--scheduling-policy": frozenset({"fcfs", "priority"}),
    "--disable-log-stats": None,
    "--disable-cascade-attn": None,
    "--async-scheduling": None,
}


def _engine_flags(cfg: EngineConfig) -> list[str]:
    """Flags shared by the launch argv and the exported command line."""
    flags = ["--max-model-len", str(cfg.max_model_len)]
    flags += ["--max-num-seqs", str(cfg.max_num_seqs)]
    flags += ["--gpu-memory-utilization", f"{cfg.memory_fraction:g}"]
    if cfg.dtype:
        flags += ["--dtype", cfg.dtype]
    if cfg.enforce_eager:
        flags.append("--enforce-eager")
    if cfg.speculative_config is not None:
        flags += ["--speculative-config", speculative_json(cfg.speculative_config)]
    flags += list(cfg.extra_args)
    return flags


def speculative_json(spec: dict) -> str:
    return json.dumps(spec, separators=(",", ":"), sort_keys=False)


def build_argv(
    cfg: EngineConfig,
    port: int,
    *,
    python: str | None = None,
    host: str = "127.0.0.1",
    launcher: list[str] | None = None,
) -> list[str]:
    """The exact argv of the server process (a list: nothing goes through a shell).

    ``launcher`` replaces ``python -m vllm.entrypoints.openai.api_server``; tests use it to
    start a fake OpenAI server with the very same flags.
    """
    argv = list(launcher or [python or sys.executable, "-m", _MODULE])
    argv += ["--model", cfg.model]
    argv += ["--served-model-name", cfg.served_model_name]
    argv += ["--host", host, "--port", str(port)]
    argv += ["--disable-uvicorn-access-log"]
    return argv + _engine_flags(cfg)


def export_cli(cfg: EngineConfig) -> str:
    """One shell line a user can paste: ``vllm serve MODEL --speculative-config '…' …``."""
    parts = ["vllm", "serve", cfg.model, *_engine_flags(cfg)]
    line = " ".join(shlex.quote(p) for p in parts)
    env = []
    if cfg.device == "cpu":
        env.append("VLLM_TARGET_DEVICE=cpu")
        if cfg.cpu_kvcache_gib is not None:
            env.append(f"VLLM_CPU_KVCACHE_SPACE={cfg.cpu_kvcache_gib}")
    return " ".join(env + [line])


def _iomp_library() -> str | None:
    """Intel OpenMP shipped in the venv: vLLM warns speculative decoding on CPU is much
    slower without it in LD_PRELOAD."""
    for base in (Path(sys.prefix) / "lib",):
        p = base / "libiomp5.so"
        if p.exists():
            return str(p)
    return None


def build_env(cfg: EngineConfig, cache_root: Path, base: dict[str, str] | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_CACHE_ROOT": str(cache_root),
            "PYTHONUNBUFFERED": "1",
            # Exposes POST /reset_prefix_cache, so one load level's prompts do not warm the
            # next's. The server listens on 127.0.0.1 only and lives for one trial.
            "VLLM_SERVER_DEV_MODE": "1",
        }
    )
    if cfg.device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        if cfg.cpu_kvcache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.cpu_kvcache_gib)
        else:
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)
        # Same runtime for every trial, baseline included, or the comparison is unfair.
        lib = _iomp_library()
        if lib and "LD_PRELOAD" not in env:
            env["LD_PRELOAD"] = lib
    return env


class VLLMServer(ServerProcess):
    """One vLLM OpenAI server for one engine configuration; use as a context manager."""

    kind: ClassVar[str] = "vllm"
    probe: ClassVar[EngineProbe] = VLLMProbe()
    extra_flags: ClassVar[Mapping[str, FlagValue]] = VLLM_EXTRA_FLAGS

    def _argv(self, port: int) -> list[str]:
        return build_argv(self.cfg, port, python=self.python, launcher=self.launcher)

    def _env(self) -> dict[str, str]:
        return build_env(self.cfg, self.cache_root)
