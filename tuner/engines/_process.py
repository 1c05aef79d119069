"""A launched engine: start it, wait until it is ready, classify a failed start, sample its
memory, and tear it down.

Why a subprocess and not the Python API: the product measures the engine as users deploy it,
through its OpenAI-compatible server, and a crash or OOM in the engine must not take the
tuner down with it. The server runs in its own session (process group) so teardown kills it
and its workers, and nothing else.
"""

from __future__ import annotations

import abc
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

import psutil

from tuner.engines._args import DTYPES, FlagValue
from tuner.engines._base import (
    ADAPTIVE_STEPS,
    EngineConfig,
    EngineLaunchError,
    FailReason,
    adaptive_refused,
)
from tuner.engines._pidfiles import reap_stale, record_group
from tuner.engines._probe import EngineProbe

__all__ = [
    "HUB_TOKEN_KEYS",
    "VISIBLE_DEVICES_ENV",
    "ServerProcess",
    "classify_failure",
    "free_port",
    "reap_stale",
]

# The one variable CUDA engines (vLLM, SGLang) read to see only some GPUs.
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"

# Hugging Face access tokens, left out of every engine's environment: the job fetches hub
# models before the launch and the engine runs offline (HF_HUB_OFFLINE=1) from that cache, so
# it never needs one, and a token an engine never had cannot end up in its log.
HUB_TOKEN_KEYS = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})

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

# How much of the log the KV-capacity line is looked for in (it is written at start).
_KV_LOG_BYTES = 200_000


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


def _tail(path: Path, max_bytes: int = 6000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class _RssSampler(threading.Thread):
    """Peak resident memory of the engine's process tree (CPU memory; on a GPU the weights
    and cache live in device memory, read from the engine log instead)."""

    def __init__(self, server: ServerProcess, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.server, self.every_s = server, every_s
        self.peak_bytes = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            proc = self.server.proc
            if proc is None:
                break
            try:
                root = psutil.Process(proc.pid)
                procs = [root, *root.children(recursive=True)]
                total = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak_bytes = max(self.peak_bytes, total)
            except psutil.Error:
                pass
            self.done.wait(self.every_s)


class ServerProcess(abc.ABC):
    """One engine server process for one engine configuration; use as a context manager.

    Subclasses say how to launch it (``_argv``, ``_env``), which probe reads it, and which
    extra flags and dtypes a job may give it (``extra_flags``, ``dtypes``)."""

    kind: ClassVar[str] = "engine"
    probe: ClassVar[EngineProbe] = EngineProbe()
    extra_flags: ClassVar[Mapping[str, FlagValue]] = {}
    dtypes: ClassVar[frozenset[str]] = DTYPES
    headers: dict[str, str] | None = None  # a launched server takes no request headers

    def __init__(
        self,
        cfg: EngineConfig,
        log_path: Path,
        *,
        cache_root: Path,
        startup_timeout_s: float = 300.0,
        launcher: list[str] | None = None,
        python: str | None = None,
        devices: str | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.devices = devices  # the worker's accelerators, e.g. "0,1" (CUDA only)
        self.run_dir = run_dir  # where the pid file of a running engine lives
        self.launcher = launcher
        self.log_path = Path(log_path)
        self.cache_root = Path(cache_root)
        self.startup_timeout_s = startup_timeout_s
        self.python = python
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self.argv: list[str] = []
        self._sampler: _RssSampler | None = None
        self._kv_cache_tokens: int | None = None
        self._pid_file: Path | None = None

    @classmethod
    def speculative_problem(
        cls, spec: Mapping[str, Any] | None, device: str = "cuda"
    ) -> str | None:
        """Why this engine cannot run the speculative config ``spec`` on ``device`` (None: it
        can). The base engine knows no drafting options: drafts other than greedy are
        refused, and so is an adaptive depth."""
        if ADAPTIVE_STEPS in (spec or {}):
            return adaptive_refused(cls.kind)
        drafting = (spec or {}).get("draft_sample_method")
        if drafting not in (None, "greedy"):
            return (
                f"methods.*.draft_sample_method: engine {cls.kind} has no draft sampling "
                f"option, so {drafting!r} drafts cannot be asked of it"
            )
        return None

    @classmethod
    def build_note(cls, cfg: EngineConfig) -> str | None:
        """A known defect of the installed engine build that bears on sampled workloads of
        ``cfg``, in one sentence, and what SpecTune does about it (None: none known)."""
        return None

    @abc.abstractmethod
    def _argv(self, port: int) -> list[str]:
        """The server's argv (a list: nothing goes through a shell)."""

    @abc.abstractmethod
    def _env(self) -> dict[str, str]:
        """The server's whole environment."""

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def command(self, port: int) -> tuple[list[str], dict[str, str]]:
        """The argv and the whole environment ``start`` gives the process; tests compare
        them with the export without launching anything."""
        env = self._env()
        if self.devices is not None and self.cfg.device == "cuda":
            env[VISIBLE_DEVICES_ENV] = self.devices
        return self._argv(port), env

    def start(self) -> None:
        self.port = free_port()
        self.argv, env = self.command(self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.cache_root.mkdir(parents=True, exist_ok=True)
        # An empty working folder of its own: a hub id (``--model org/name``) is never taken
        # for a folder of that name wherever the worker was started (vLLM looks there first).
        cwd = self.cache_root / "cwd"
        cwd.mkdir(exist_ok=True)
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
                cwd=cwd,
                start_new_session=True,
            )
        self._pid_file = record_group(self.run_dir, self.proc.pid, self.argv)
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        self._sampler = _RssSampler(self)
        self._sampler.start()
        self._kv_cache_tokens = self.probe.kv_cache_tokens(self.log_tail(_KV_LOG_BYTES))

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

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the engine's process tree has used so far: what the
        measurement subtracts from the host's busy time to see other load (None: stopped)."""
        proc = self.proc
        if proc is None:
            return None
        try:
            root = psutil.Process(proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def log_tail(self, max_bytes: int = 6000) -> str:
        return _tail(self.log_path, max_bytes)

    def kv_cache_tokens(self) -> int | None:
        """The KV-cache capacity (tokens) the engine reported at start; None if it did not."""
        return self._kv_cache_tokens

    @property
    def peak_rss_mb(self) -> float | None:
        """Peak resident memory of the process tree since it became ready (MiB)."""
        s = self._sampler
        return round(s.peak_bytes / 2**20, 1) if s is not None and s.peak_bytes else None

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
        if self._pid_file is not None:
            self._pid_file.unlink(missing_ok=True)
            self._pid_file = None
        sampler = self._sampler
        if sampler is not None:
            sampler.done.set()
            sampler.join(timeout=2.0)
