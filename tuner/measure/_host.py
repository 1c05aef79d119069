"""Other load on the host while a point is measured: the share of the machine's CPU that
processes other than the engine's tree and this one (the load generator) used.

Why: a launch measured while something else hogs the CPU (a test run, a second job, a noisy
neighbour's steal time on a VM) is slow from start to end, so its repeats agree and nothing
inside the launch says it was disturbed; yet it moves the between-launch spread, and with it
every interval and the search's stop rule (seen here: a baseline measured at 282 tok/s under a
concurrent test run, relaunched at 644). The host's busy time (``psutil.cpu_times``: all but
idle and iowait; steal counts as other load) less the engine's and ours is the others'.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil

__all__ = ["HostLoad", "busy_cpu_s"]


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (all cores): what is not idle or iowait."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    return total - idle


def _own_cpu_s() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


class HostLoad:
    """Started before a point's repeats, read after them. ``engine_cpu_s`` is the server's
    ``cpu_s`` (None for a hosted endpoint or a server that cannot say: nothing is judged)."""

    def __init__(
        self,
        engine_cpu_s: Callable[[], float | None] | None,
        busy: Callable[[], float] = busy_cpu_s,
        own: Callable[[], float] = _own_cpu_s,
        cores: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine, self._busy, self._own, self._clock = engine_cpu_s, busy, own, clock
        self._cores = cores or psutil.cpu_count() or 1
        self._e0 = engine_cpu_s() if engine_cpu_s is not None else None
        self._b0, self._o0, self._t0 = busy(), own(), clock()

    def other_share(self) -> float | None:
        """The others' share of the machine's CPU since the start (0..1), or None."""
        if self._engine is None or self._e0 is None:
            return None
        e1 = self._engine()
        wall = self._clock() - self._t0
        if e1 is None or wall <= 0:
            return None
        others = (self._busy() - self._b0) - (e1 - self._e0) - (self._own() - self._o0)
        return min(1.0, max(0.0, others / (wall * self._cores)))
