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
from pathlib import Path

from tuner.engines._base import EngineConfig
from tuner.engines._vllm import VLLMServer

__all__ = [
    "SGLANG_ALGORITHMS",
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


def sglang_spec_flags(spec: dict | None) -> list[str]:
    """Speculative flags for one vLLM ``speculative_config`` (chain drafting, top-k 1)."""
    if not spec:
        return []
    method = spec["method"]
    if method not in SGLANG_ALGORITHMS:
        raise ValueError(f"method {method!r} has no SGLang equivalent")
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
    flags += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", str(k + 1)]  # fmt: skip
    return flags


def sglang_argv(cfg: EngineConfig, *, host: str | None = None,
                port: int | None = None) -> list[str]:  # fmt: skip
    argv = [
        "--model-path", cfg.model,
        "--served-model-name", cfg.served_model_name,
        "--context-length", str(cfg.max_model_len),
        "--max-running-requests", str(cfg.max_num_seqs),
        "--mem-fraction-static", f"{cfg.memory_fraction:g}",
        "--cuda-graph-max-bs", str(cfg.max_num_seqs),
    ]  # fmt: skip
    if host is not None:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    if cfg.dtype:
        argv += ["--dtype", cfg.dtype]
    return argv + sglang_spec_flags(cfg.speculative_config)


class SGLangServer(VLLMServer):
    """One ``sglang.launch_server`` process for one configuration (same lifecycle as vLLM's:
    own process group, ``/health`` polled, killed by group). Acceptance comes from its
    ``sglang:spec_accept_*`` gauges sampled during the run (``loadgen.measure``)."""

    kind = "sglang"

    def _argv(self, port: int) -> list[str]:
        prefix = self.launcher or [self.python or sys.executable, "-m", _MODULE]
        # --enable-metrics: /metrics (the acceptance gauges) is off by default in SGLang.
        return [*prefix, *sglang_argv(self.cfg, host="127.0.0.1", port=port),
                "--enable-metrics", *self.cfg.extra_args]  # fmt: skip

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "PYTHONUNBUFFERED": "1", "SGLANG_CACHE_ROOT": str(Path(self.cache_root))})
        return env  # fmt: skip


def sglang_cli(cfg: EngineConfig) -> str:
    """One shell line: ``python -m sglang.launch_server …`` (GPU; SGLang does not run on
    vLLM's CPU path)."""
    parts = ["python", "-m", "sglang.launch_server", *sglang_argv(cfg)]
    return " ".join(shlex.quote(p) for p in parts)
