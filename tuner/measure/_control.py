"""How a trial or a job stops early: failure, pruning, cancellation."""

from __future__ import annotations

import threading
from typing import Protocol

from tuner.measure._measured import Measured

__all__ = ["JobCancelled", "JobControl", "Pruned", "TrialFailed"]


class TrialFailed(RuntimeError):
    """Raised inside the objective so Optuna records FAIL while the study goes on."""

    def __init__(self, reason: str, detail: str, log_path: str | None = None) -> None:
        super().__init__(f"{reason}: {detail[-300:]}")
        self.reason = reason
        self.detail = detail
        self.log_path = log_path  # the engine log, when an engine was launched


class Pruned(Exception):
    """The objective point is clearly dominated: the trial stops with what it measured
    (``measured``: the points so far; the measurer adds its launch facts on the way out)."""

    def __init__(self, evidence: str, measured: Measured) -> None:
        super().__init__(evidence)
        self.evidence = evidence
        self.measured = measured


class JobCancelled(RuntimeError):
    pass


class _Stoppable(Protocol):
    def stop(self, grace_s: float = ...) -> None: ...


class JobControl:
    """Lets another thread cancel a running job: the engine in flight is stopped at once,
    finished trials are kept, and the job ends ``cancelled``."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._server: _Stoppable | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            server = self._server
        if server is not None:
            server.stop(grace_s=5)

    def attach(self, server: _Stoppable | None) -> None:
        """The engine now running (None: none); a cancel stops it."""
        with self._lock:
            self._server = server
        if server is not None and self.cancelled:
            server.stop(grace_s=5)
