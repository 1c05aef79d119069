"""SGLang's form of a candidate: ``python -m sglang.launch_server`` flags.

SGLang describes speculation with an algorithm and a steps / top-k / draft-tokens triple that
must agree: with top-k 1 (a chain, what vLLM's depth means) draft tokens = steps + 1. This
module keeps that triple consistent from vLLM's ``num_speculative_tokens``. Nothing here
imports SGLang (its kernels need CUDA); ``SGLangServer`` launches it as a process, on a GPU.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from typing import ClassVar

from tuner.engines._args import FlagValue
from tuner.engines._base import EngineConfig, ExportUnsupported
from tuner.engines._probe import EngineProbe
from tuner.engines._process import HUB_TOKEN_KEYS, ServerProcess
from tuner.engines._sglang_probe import SGLangProbe

__all__ = [
    "SGLANG_ALGORITHMS",
    "SGLANG_EXTRA_FLAGS",
    "SGLangServer",
    "sglang_argv",
    "sglang_cli",
    "sglang_spec_flags",
]

_MODULE = "sglang.launch_server"

# vLLM method -> SGLang --speculative-algorithm (NEXTN is SGLang's name for MTP heads).
SGLANG_ALGORITHMS = {
    "ngram": "NGRAM",
    "draft_model": "STANDALONE",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "mtp": "NEXTN",
}

# The flags a job's ``engine.extra_args`` may pass to SGLang (as VLLM_EXTRA_FLAGS: never
# host, port, key, model, name, dtype, the searched parameters or the speculative flags).
SGLANG_EXTRA_FLAGS: Mapping[str, FlagValue] = {
    "--chunked-prefill-size": "int",
    "--max-prefill-tokens": "int",
    "--page-size": "int",
    "--schedule-policy": frozenset({"lpm", "random", "fcfs", "dfs-weight"}),
    "--schedule-conservativeness": "number",
    "--kv-cache-dtype": frozenset({"auto", "fp8_e4m3", "fp8_e5m2"}),
    "--random-seed": "int",
    "--disable-radix-cache": None,
    "--disable-cuda-graph": None,
    "--disable-overlap-schedule": None,
    "--attention-backend": frozenset({"flashinfer", "triton", "torch_native", "fa3"}),
}


def sglang_spec_flags(spec: dict | None) -> list[str]:
    """Speculative flags for one vLLM ``speculative_config`` (chain drafting, top-k 1)."""
    if not spec:
        return []
    method = spec["method"]
    if method not in SGLANG_ALGORITHMS:
        raise ExportUnsupported(f"method {method!r} has no SGLang equivalent")
    if spec.get("draft_sample_method") not in (None, "greedy"):
        raise ExportUnsupported("SGLang has no draft sampling option (its drafts are greedy)")
    k = int(spec["num_speculative_tokens"])
    flags = ["--speculative-algorithm", SGLANG_ALGORITHMS[method]]
    if method == "ngram":
        flags += ["--speculative-num-draft-tokens", str(k + 1)]
        if spec.get("prompt_lookup_min") is not None:
            flags += ["--speculative-ngram-min-match-window-size", str(spec["prompt_lookup_min"])]
        if spec.get("prompt_lookup_max") is not None:
            flags += ["--speculative-ngram-max-match-window-size", str(spec["prompt_lookup_max"])]
        return flags
    if method in ("draft_model", "eagle", "eagle3") and spec.get("model"):
        flags += ["--speculative-draft-model-path", str(spec["model"])]
    # The triple, set together: steps = depth, top-k 1, draft tokens = steps + 1.
    flags += ["--speculative-num-steps", str(k)]
    flags += ["--speculative-eagle-topk", "1"]
    flags += ["--speculative-num-draft-tokens", str(k + 1)]
    return flags


def sglang_argv(
    cfg: EngineConfig, *, host: str | None = None, port: int | None = None
) -> list[str]:
    argv = ["--model-path", cfg.model]
    argv += ["--served-model-name", cfg.served_model_name]
    argv += ["--context-length", str(cfg.max_model_len)]
    argv += ["--max-running-requests", str(cfg.max_num_seqs)]
    argv += ["--mem-fraction-static", f"{cfg.memory_fraction:g}"]
    argv += ["--cuda-graph-max-bs", str(cfg.max_num_seqs)]
    if host is not None:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    if cfg.dtype:
        argv += ["--dtype", cfg.dtype]
    if cfg.chat_template:
        argv += ["--chat-template", cfg.chat_template]
    return argv + sglang_spec_flags(cfg.speculative_config)


class SGLangServer(ServerProcess):
    """One ``sglang.launch_server`` process for one configuration (own process group,
    ``/health`` polled, killed by group). Acceptance comes from its acceptance gauges sampled
    during a measured window (``SGLangProbe``)."""

    kind: ClassVar[str] = "sglang"
    probe: ClassVar[EngineProbe] = SGLangProbe()
    extra_flags: ClassVar[Mapping[str, FlagValue]] = SGLANG_EXTRA_FLAGS

    def _argv(self, port: int) -> list[str]:
        prefix = self.launcher or [self.python or sys.executable, "-m", _MODULE]
        # --enable-metrics: /metrics (the acceptance gauges) is off by default in SGLang.
        argv = sglang_argv(self.cfg, host="127.0.0.1", port=port)
        return [*prefix, *argv, "--enable-metrics", *self.cfg.extra_args]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in HUB_TOKEN_KEYS}
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env["SGLANG_CACHE_ROOT"] = str(self.cache_root)
        return env


def sglang_cli(cfg: EngineConfig) -> str:
    """One shell line: ``python -m sglang.launch_server …`` (GPU; SGLang does not run on
    vLLM's CPU path)."""
    parts = ["python", "-m", "sglang.launch_server", *sglang_argv(cfg)]
    return " ".join(shlex.quote(p) for p in parts)
