"""vLLM backend: the argv and environment of one candidate's ``vllm serve``, and the exported
command line. The process lifecycle is ``ServerProcess``'s; what the server reports is
``VLLMProbe``'s.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from tuner.engines._args import FlagValue
from tuner.engines._base import ADAPTIVE_STEPS, EngineConfig, ExportUnsupported, adaptive_refused
from tuner.engines._probe import EngineProbe
from tuner.engines._process import HUB_TOKEN_KEYS, ServerProcess
from tuner.engines._vllm_cpu_fix import (
    EXPORT_NOTE,
    FIX_ENV,
    FIXED_NOTE,
    cpu_sampling_defect,
    fix_installed,
    fix_switched_off,
)
from tuner.engines._vllm_probe import VLLMProbe

__all__ = [
    "ARCTIC_VERSION",
    "VLLM_EXTRA_FLAGS",
    "VLLM_METHODS",
    "VLLMServer",
    "build_argv",
    "build_env",
    "export_cli",
    "is_speed_key",
    "speculative_json",
    "speed_env",
    "suffix_trees_installed",
    "suffix_trees_missing",
    "vllm_runner_has",
]

_MODULE = "vllm.entrypoints.openai.api_server"

# vLLM spells each method as SpecTune does (``speculative_config.method``).
VLLM_METHODS = {
    m: m
    for m in (
        "ngram",
        "draft_model",
        "eagle",
        "eagle3",
        "mtp",
        "suffix",
        "medusa",
        "mlp_speculator",
        "ngram_gpu",
        "dflash",
        "dspark",
    )
}

# Methods vLLM runs only on a GPU, and why (checked against the installed source: 0.32's CPU
# platform patches DFlash's input kernel, so DFlash and DSpark are not refused on CPU).
_GPU_ONLY = {
    "ngram_gpu": "its lookup runs as torch.compile'd device kernels over pinned-memory "
    "buffers in vLLM's GPU model runner; on CPU use method ngram, vLLM's CPU lookup",
}

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
    if cfg.chat_template:
        flags += ["--chat-template", cfg.chat_template]
    if cfg.speculative_config is not None:
        flags += ["--speculative-config", speculative_json(cfg.speculative_config)]
    flags += list(cfg.extra_args)
    return flags


@functools.cache
def vllm_has_spec_field(name: str) -> bool | None:
    """Whether the installed vLLM's ``SpeculativeConfig`` declares ``name`` (None: vLLM is
    not installed here, so nothing can be said). Read from its source, not imported: an
    import of vLLM takes seconds and loads torch."""
    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        return None
    for root in found.submodule_search_locations:
        src = Path(root) / "config" / "speculative.py"
        if src.is_file():
            return re.search(rf"^\s+{re.escape(name)}\s*:", src.read_text(), re.M) is not None
    return None


@functools.cache
def vllm_runner_has(method: str) -> bool | None:
    """Whether the installed vLLM's V1 model runner builds a proposer for ``method`` (its
    ``SpeculativeConfig`` accepts more methods than the runner has: 0.32 takes
    ``mlp_speculator`` and the runner then raises at start, after the model loaded). Read
    from its source; None: vLLM is not installed here."""
    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        return None
    for root in found.submodule_search_locations:
        src = Path(root) / "v1" / "worker" / "gpu_model_runner.py"
        if src.is_file():
            return (
                re.search(rf"""method\s*==\s*["']{re.escape(method)}["']""", src.read_text())
                is not None
            )
    return None


ARCTIC_VERSION = "0.1.1"  # what vLLM 0.32's suffix decoding asks for


@functools.cache
def suffix_trees_installed() -> bool:
    """Whether this interpreter (the one that launches vLLM) can import Arctic Inference's
    suffix trees; found, not imported (its import loads a compiled extension)."""
    try:
        return importlib.util.find_spec("arctic_inference.suffix_decoding") is not None
    except ModuleNotFoundError:
        return False


def suffix_trees_missing() -> str | None:
    """Why vLLM's suffix decoding cannot run here (None: it can)."""
    if suffix_trees_installed():
        return None
    return (
        f"it imports arctic_inference (the arctic-inference=={ARCTIC_VERSION} package), which "
        "is not installed where the engine runs; scripts/install_arctic_inference.sh builds "
        "it (make does)"
    )


def speculative_json(spec: dict) -> str:
    """``--speculative-config``'s value; ExportUnsupported for what vLLM has no field for."""
    if ADAPTIVE_STEPS in spec:
        raise ExportUnsupported(adaptive_refused("vLLM"))
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


# Inherited variables that change how fast the engine runs: the OpenMP/BLAS runtimes' thread
# counts and pinning, vLLM's CPU knobs, and the few vLLM switches that pick kernels or the
# process layout. Everything else the launch inherits (HOME, PATH, ports, folders, keys) is
# either machine-private or has no bearing on speed, and stays out of the export.
SPEED_ENV_PREFIXES = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "VLLM_CPU_")
SPEED_ENV_KEYS = frozenset(
    {
        "LD_PRELOAD",
        "MALLOC_ARENA_MAX",
        "PYTORCH_CUDA_ALLOC_CONF",
        "VLLM_TARGET_DEVICE",
        "VLLM_ATTENTION_BACKEND",
        "VLLM_USE_V1",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_USE_FLASHINFER_SAMPLER",
        "VLLM_FLASH_ATTN_VERSION",
    }
)


def is_speed_key(key: str) -> bool:
    """Whether an environment variable of the launch can change the engine's speed."""
    return key in SPEED_ENV_KEYS or key.startswith(SPEED_ENV_PREFIXES)


def _iomp_library() -> str | None:
    """Intel OpenMP shipped in the venv: vLLM warns speculative decoding on CPU is much
    slower without it in LD_PRELOAD."""
    for base in (Path(sys.prefix) / "lib",):
        p = base / "libiomp5.so"
        if p.exists():
            return str(p)
    return None


def speed_env(cfg: EngineConfig, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of a launch's environment that changes the engine's speed: the launch takes
    exactly these speed variables and the export prints exactly these, so the two cannot
    drift.

    Kept: what SpecTune sets (on CPU ``VLLM_TARGET_DEVICE=cpu``, ``VLLM_CPU_KVCACHE_SPACE``
    from the space, ``LD_PRELOAD`` of the venv's Intel OpenMP unless the caller's
    environment preloads something already) and the inherited variables ``is_speed_key``
    names (OpenMP/MKL threads and pinning, ``VLLM_CPU_*``, kernel and process-layout
    switches). Left out: ports, hosts, API keys, log and cache folders, HOME, PATH, device
    masks (``CUDA_VISIBLE_DEVICES`` picks this machine's GPUs), offline and telemetry switches:
    private to the machine or no bearing on speed. ``base``: the environment the launch
    inherits (this process's when None)."""
    src = os.environ if base is None else base
    env = {k: v for k, v in src.items() if is_speed_key(k)}
    if cfg.device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        if cfg.cpu_kvcache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.cpu_kvcache_gib)
        else:
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the memory fraction decides then
        # Same runtime for every trial, baseline included, or the comparison is unfair.
        lib = _iomp_library()
        if lib and "LD_PRELOAD" not in env:
            env["LD_PRELOAD"] = lib
    return env


def _machine_note(env: Mapping[str, str]) -> str:
    """A shell comment naming the values that are paths on the measuring machine, so whoever
    pastes the command elsewhere knows which to point at their own copy (a preload that is
    missing there is skipped with a warning, and the engine runs slower than measured)."""
    paths = sorted(k for k, v in env.items() if v.startswith("/"))
    if not paths:
        return ""
    what = "a path" if len(paths) == 1 else "paths"
    note = f"# {', '.join(paths)}: {what} on the measuring machine"
    if env.get("LD_PRELOAD", "").endswith("libiomp5.so"):
        note += "; elsewhere preload your own libiomp5.so (pip install intel-openmp)"
    return note + "\n"


def export_cli(cfg: EngineConfig, base: Mapping[str, str] | None = None) -> str:
    """The command to paste: ``ENV=VALUE … vllm serve MODEL --speculative-config '…' …``
    with the speed environment and the flags the trial launched with (``speed_settings``),
    one line; a ``#`` line before it names values that are paths on the measuring machine,
    and on CPU another says why a speculative server carries SpecTune's sampling fix switch.
    The command stays the last line, so flags appended to the output land on it."""
    env, flags = VLLMServer.speed_settings(cfg, base)
    note = _machine_note(env)
    shown = dict(env)
    if cfg.device == "cpu" and cfg.speculative_config:
        shown[FIX_ENV] = "1"  # the user's CPU server has the measured build's defect too
        note += EXPORT_NOTE
    words = [f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items())]
    parts = ["vllm", "serve", cfg.model, *flags]
    return note + " ".join(words + [shlex.join(parts)])


def build_env(cfg: EngineConfig, cache_root: Path, base: dict[str, str] | None = None) -> dict:
    """The server's whole environment: the inherited one less its speed variables and hub
    tokens, the machine-private settings below (offline: a hub id loads from the cache the
    job filled; HF_HUB_CACHE/HF_HOME are inherited; on CPU the switch of SpecTune's vLLM
    plugin, ``_vllm_cpu_fix``), then ``speed_env`` (the only source of
    speed variables)."""
    src = os.environ if base is None else base
    env = {k: v for k, v in src.items() if not is_speed_key(k) and k not in HUB_TOKEN_KEYS}
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
    if cfg.device == "cpu" and not fix_switched_off(src):
        # Asks SpecTune's vLLM plugin to fix the CPU build's sampling defect (a no-op on a
        # build without it). ``SPECTUNE_VLLM_CPU_EXPAND_FIX=0`` where SpecTune runs keeps
        # it off: the defect measured as an unfixed server has it.
        env[FIX_ENV] = "1"
    else:
        env.pop(FIX_ENV, None)
    env.update(speed_env(cfg, src))
    return env


class VLLMServer(ServerProcess):
    """One vLLM OpenAI server for one engine configuration; use as a context manager."""

    kind: ClassVar[str] = "vllm"
    probe: ClassVar[EngineProbe] = VLLMProbe()
    extra_flags: ClassVar[Mapping[str, FlagValue]] = VLLM_EXTRA_FLAGS

    @classmethod
    def speculative_problem(
        cls, spec: Mapping[str, Any] | None, device: str = "cuda"
    ) -> str | None:
        """vLLM takes ``draft_sample_method`` where its ``SpeculativeConfig`` has the field
        (0.32 does; older releases refuse the key at start, after a minute's load), suffix
        decoding only with Arctic Inference's suffix trees installed beside it, and a GPU-only
        method only on a GPU."""
        method = (spec or {}).get("method")
        if ADAPTIVE_STEPS in (spec or {}):
            return adaptive_refused("vLLM")
        if device == "cpu" and (why := _GPU_ONLY.get(str(method))) is not None:
            return f"methods.{method}: vLLM runs {method} only on a GPU ({why})"
        if method == "mlp_speculator" and vllm_runner_has(method) is False:
            return (
                "methods.mlp_speculator: the installed vLLM's model runner has no MLP "
                "speculator proposer (its speculative config accepts the method; the runner "
                "raises 'Unknown speculative decoding method' at start, after the model load)"
            )
        if method == "suffix" and (why := suffix_trees_missing()):
            return f"methods.suffix: vLLM's suffix decoding: {why}"
        if (spec or {}).get("draft_sample_method") is None:
            return None
        if vllm_has_spec_field("draft_sample_method") is False:
            return (
                "methods.*.draft_sample_method: the installed vLLM's speculative config has "
                "no draft_sample_method (vLLM 0.32 has it)"
            )
        return None

    @classmethod
    def build_note(cls, cfg: EngineConfig) -> str | None:
        """On CPU with speculation: the expand defect when the self-test finds it in this
        interpreter's vLLM (a child process, seconds, once) and that the plugin fixes it."""
        if cfg.device != "cpu" or not cfg.speculative_config:
            return None
        defect = cpu_sampling_defect()
        if defect is None:
            return None
        if fix_switched_off(os.environ):
            return f"{defect}; {FIX_ENV}=0 keeps SpecTune's fix off for these launches"
        if not fix_installed():
            return (
                f"{defect}; SpecTune's fix is not installed where the engine runs (its "
                "vllm.general_plugins entry point is missing: reinstall spectune there), so "
                "sampled results are flagged"
            )
        return f"{defect}; {FIXED_NOTE}"

    def _argv(self, port: int) -> list[str]:
        return build_argv(self.cfg, port, python=self.python, launcher=self.launcher)

    def _env(self) -> dict[str, str]:
        return build_env(self.cfg, self.cache_root)

    @classmethod
    def speed_settings(
        cls, cfg: EngineConfig, base: Mapping[str, str] | None = None
    ) -> tuple[dict[str, str], list[str]]:
        """The environment and the engine flags of a launch of ``cfg`` that change its speed:
        what the launch uses (``build_env``, ``build_argv``) and the export prints."""
        return speed_env(cfg, base), _engine_flags(cfg)
