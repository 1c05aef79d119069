"""SGLang's form of a candidate: ``python -m sglang.launch_server`` flags.

SGLang describes speculation with an algorithm and a steps / top-k / draft-tokens triple that
must agree: with top-k 1 (a chain, what vLLM's depth means) draft tokens = steps + 1. This
module keeps that triple consistent from vLLM's ``num_speculative_tokens``. Nothing here
imports SGLang (its kernels need CUDA); ``SGLangServer`` launches it as a process, on a GPU.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

from tuner.engines._args import FlagValue
from tuner.engines._base import ADAPTIVE_STEPS, EngineConfig, ExportUnsupported
from tuner.engines._probe import EngineProbe
from tuner.engines._process import HUB_TOKEN_KEYS, ServerProcess
from tuner.engines._sglang_probe import SGLangProbe

__all__ = [
    "SGLANG_ALGORITHMS",
    "SGLANG_EXTRA_FLAGS",
    "SGLangServer",
    "sglang_adaptive_config",
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


# The file an exported command line writes SGLang's adaptive config to (a launch writes its
# own beside the trial's log).
ADAPTIVE_FILE = "sglang-adaptive.json"
_ADAPTIVE_METHODS = ("eagle", "eagle3")  # SGLang adapts EAGLE's chain (top-k 1) only


def sglang_adaptive_config(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The JSON ``--speculative-adaptive-config`` reads, or None when the config is not
    adaptive. The candidate steps hold the trial's depth (the step SGLang starts at, which
    newer releases refuse unless listed). Written in both layouts SGLang has read: the
    top-level ``candidate_steps`` of its first releases and the per-batch-size entries of
    later ones (key ``"1"``: every batch size), each of which ignores the other's keys."""
    if not spec or ADAPTIVE_STEPS not in spec:
        return None
    steps = sorted({*(int(s) for s in spec[ADAPTIVE_STEPS]), int(spec["num_speculative_tokens"])})
    return {"candidate_steps": steps, "1": {"candidate_steps": steps}}


def sglang_spec_flags(spec: dict | None, adaptive_file: str = ADAPTIVE_FILE) -> list[str]:
    """Speculative flags for one vLLM ``speculative_config`` (chain drafting, top-k 1);
    ``adaptive_file``: where ``sglang_adaptive_config`` is written, for an adaptive one."""
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
    if ADAPTIVE_STEPS in spec:
        if method not in _ADAPTIVE_METHODS:
            raise ExportUnsupported(
                f"SGLang's adaptive speculation adapts EAGLE only, not {method!r}"
            )
        flags += ["--speculative-adaptive", "--speculative-adaptive-config", adaptive_file]
    return flags


def sglang_argv(
    cfg: EngineConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    adaptive_file: str = ADAPTIVE_FILE,
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
    return argv + sglang_spec_flags(cfg.speculative_config, adaptive_file)


class SGLangServer(ServerProcess):
    """One ``sglang.launch_server`` process for one configuration (own process group,
    ``/health`` polled, killed by group). Acceptance comes from its acceptance gauges sampled
    during a measured window (``SGLangProbe``)."""

    kind: ClassVar[str] = "sglang"
    probe: ClassVar[EngineProbe] = SGLangProbe()
    extra_flags: ClassVar[Mapping[str, FlagValue]] = SGLANG_EXTRA_FLAGS

    @classmethod
    def speculative_problem(
        cls, spec: Mapping[str, Any] | None, device: str = "cuda"
    ) -> str | None:
        """SGLang takes the methods it has a name for, an adaptive depth for EAGLE's chain
        only, and greedy drafts only (its drafts are greedy)."""
        method = (spec or {}).get("method")
        if method is not None and method not in SGLANG_ALGORITHMS:
            return f"methods.{method}: SGLang has no {method} proposer"
        if spec and ADAPTIVE_STEPS in spec:
            if spec.get("method") not in _ADAPTIVE_METHODS:
                return (
                    f"methods.{spec.get('method')}.adaptive: SGLang's adaptive speculation "
                    "adapts EAGLE and EAGLE-3 only"
                )
            spec = {k: v for k, v in spec.items() if k != ADAPTIVE_STEPS}
        return super().speculative_problem(spec, device)

    def _argv(self, port: int) -> list[str]:
        prefix = self.launcher or [self.python or sys.executable, "-m", _MODULE]
        adaptive = sglang_adaptive_config(self.cfg.speculative_config)
        where = self.log_path.with_name(f"{self.log_path.stem}.{ADAPTIVE_FILE}")
        if adaptive is not None:  # beside the trial's log: kept with what the trial ran
            where.write_text(json.dumps(adaptive) + "\n")
        # --enable-metrics: /metrics (the acceptance gauges) is off by default in SGLang.
        argv = sglang_argv(self.cfg, host="127.0.0.1", port=port, adaptive_file=str(where))
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
    line = " ".join(shlex.quote(p) for p in parts)
    adaptive = sglang_adaptive_config(cfg.speculative_config)
    if adaptive is None:
        return line
    # Still one line to paste: the adaptive config file first, then the server.
    return f"echo {shlex.quote(json.dumps(adaptive))} > {ADAPTIVE_FILE} && {line}"
