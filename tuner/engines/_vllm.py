"""vLLM backend: build argv/env for one candidate, launch, wait for readiness, tear down.

Why a subprocess and not the Python API: the product measures the engine as users deploy it,
through its OpenAI-compatible server, and a crash or OOM in the engine must not take the
tuner down with it. The server runs in its own session (process group) so teardown kills it
and its workers, and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tuner.engines._base import EngineConfig, EngineLaunchError, FailReason

__all__ = ["VLLMServer", "build_argv", "build_env", "classify_failure", "export_cli", "free_port"]

_MODULE = "vllm.entrypoints.openai.api_server"

# Ordered: the first family whose pattern matches the log tail names the reason.
_OOM_PATTERNS = [
    r"out of memory",
    r"OutOfMemoryError",
    r"Cannot allocate memory",
    r"less than desired CPU memory utilization",
    r"No available memory for the cache blocks",
    r"larger than the available KV cache memory",
    r"std::bad_alloc",
    r"MemoryError",
    r"insufficient memory",
]
_INVALID_PATTERNS = [
    r"error: argument",
    r"error: unrecognized arguments",
    r"invalid choice",
    r"ValidationError",
    r"validation error",
    r"is not supported",
    r"not supported for",
    r"No such file or directory",
    r"does not appear to have a file named",
    r"HFValidationError",
    r"Repo id must be",
    r"Unrecognized model",
    r"Invalid speculative",
    r"must be (?:a |an |at |less|greater|positive|divisible)",
    r"are not compatible",
]


def classify_failure(log_tail: str, returncode: int | None, timed_out: bool) -> FailReason:
    """Map how a start failed to a reason users can act on."""
    if timed_out:
        return "startup_timeout"
    if returncode is not None and returncode in (-signal.SIGKILL, 137):
        # Killed by the kernel's OOM killer is by far the usual cause of a SIGKILL we did
        # not send ourselves.
        return "oom"
    for pat in _OOM_PATTERNS:
        if re.search(pat, log_tail, re.IGNORECASE):
            return "oom"
    for pat in _INVALID_PATTERNS:
        if re.search(pat, log_tail, re.IGNORECASE):
            return "invalid_config"
    return "crash"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _engine_flags(cfg: EngineConfig) -> list[str]:
    """Flags shared by the launch argv and the exported command line."""
    flags = [
        "--max-model-len", str(cfg.max_model_len),
        "--max-num-seqs", str(cfg.max_num_seqs),
        "--gpu-memory-utilization", f"{cfg.memory_fraction:g}",
    ]  # fmt: skip
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
    return [
        *(launcher or [python or sys.executable, "-m", _MODULE]),
        "--model", cfg.model,
        "--served-model-name", cfg.served_model_name,
        "--host", host,
        "--port", str(port),
        "--disable-uvicorn-access-log",
        *_engine_flags(cfg),
    ]  # fmt: skip


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


def _tail(path: Path, max_bytes: int = 6000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class VLLMServer:
    """One vLLM OpenAI server for one engine configuration; use as a context manager."""

    def __init__(
        self,
        cfg: EngineConfig,
        log_path: Path,
        *,
        cache_root: Path,
        startup_timeout_s: float = 300.0,
        python: str | None = None,
        launcher: list[str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.launcher = launcher
        self.log_path = Path(log_path)
        self.cache_root = Path(cache_root)
        self.startup_timeout_s = startup_timeout_s
        self.python = python
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self.argv: list[str] = []

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    kind = "vllm"

    def _argv(self, port: int) -> list[str]:
        return build_argv(self.cfg, port, python=self.python, launcher=self.launcher)

    def _env(self) -> dict[str, str]:
        return build_env(self.cfg, self.cache_root)

    def start(self) -> None:
        self.port = free_port()
        self.argv = self._argv(self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.cache_root.mkdir(parents=True, exist_ok=True)
        env = self._env()
        t0 = time.monotonic()
        with self.log_path.open("wb") as log:
            log.write(("$ " + shlex.join(self.argv) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0

    def _wait_ready(self, t0: float) -> None:
        proc = self.proc  # local: stop() from another thread clears self.proc
        if proc is None:
            raise EngineLaunchError("crash", "engine stopped before it started")
        url = self.base_url + "/health"
        while True:
            rc = proc.poll()
            if rc is not None:
                tail = _tail(self.log_path)
                reason = classify_failure(tail, rc, timed_out=False)
                raise EngineLaunchError(reason, f"engine exited with code {rc} during start", tail)
            if time.monotonic() - t0 > self.startup_timeout_s:
                tail = _tail(self.log_path)
                raise EngineLaunchError(
                    "startup_timeout",
                    f"engine not ready after {self.startup_timeout_s:.0f} s",
                    tail,
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, max_bytes: int = 6000) -> str:
        return _tail(self.log_path, max_bytes)

    def stop(self, grace_s: float = 20.0) -> None:
        """Terminate the server's own process group (its workers included), then reap."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # Workers can outlive the leader; make sure the whole group is gone.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None
