"""Logging a failure that repeats on a timer: the first in full, then a short line now and then.

Why: a heartbeat beats every few seconds, so a database that turned read-only (or went away)
fails every beat the same way, and a traceback each time buries the log in copies of one
error. The first failure keeps its traceback (nothing is hidden), the same failure again is
counted and reported in one line at most every ``every_s``, and the end of it gets one line.
Standard library only: the storage layer and the worker both use it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RepeatedFailure", "first_line"]

REPORT_EVERY_S = 300.0


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def first_line(exc: BaseException) -> str:
    """The error's first line, and its root cause's: a database error goes on with its SQL
    and parameters, which change with every beat (a timestamp) and say nothing new, and a
    wrapper's own words can mislead (Optuna calls any failed commit "invalid data")."""
    root, seen = exc, {id(exc)}
    while root.__cause__ is not None and id(root.__cause__) not in seen:
        root = root.__cause__
        seen.add(id(root))
    line = _one_line(exc)
    return line if root is exc else f"{line} (cause: {_one_line(root)})"


class RepeatedFailure:
    """One of these per repeating action (``what``: "job 3: heartbeat"); thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        every_s: float = REPORT_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.what, self.every_s, self._clock = logger, what, every_s, clock
        self._lock = threading.Lock()
        self._error: str | None = None  # the failure going on, as its first line
        self._count = 0  # its occurrences so far
        self._since = self._reported = 0.0

    def __getstate__(self) -> dict[str, Any]:  # picklable with the storage that holds it
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def failed(self, exc: BaseException) -> None:
        """Log ``exc`` in full when it is new (or differs from the last), else count it and
        log one line when ``every_s`` has passed since the last report."""
        line, now = first_line(exc), self._clock()
        with self._lock:
            if line != self._error:
                self._error, self._count, self._since, self._reported = line, 1, now, now
                full = True
            else:
                self._count += 1
                full = False
                if now - self._reported < self.every_s:
                    return
                self._reported = now
            count, since = self._count, now - self._since
        if full:
            self.log.error(
                "%s failed (the same failure again is reported every %.0f s): %s",
                self.what,
                self.every_s,
                line,
                exc_info=exc,
            )
        else:
            self.log.warning(
                "%s still failing: %d times in %.0f s: %s", self.what, count, since, line
            )

    def ok(self) -> None:
        """The action worked: one line if it had been failing."""
        with self._lock:
            if self._error is None:
                return
            count, since = self._count, self._clock() - self._since
            self._error = None
        self.log.warning("%s works again after %d failures in %.0f s", self.what, count, since)
