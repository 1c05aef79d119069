"""The replay backend: answers a trial from a recorded surface instead of launching an engine.

For benchmarking the search only. It is never the default (``engine.kind: replay`` must be
asked for), every measurement it returns carries ``"replay": <surface path>``, and a job that
used it refuses to export a winner. The numbers are real, but they were measured by the job
that recorded the surface, not by this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.engines._base import FAIL_REASONS, EngineLaunchError
from tuner.surface import Surface, read_surface

__all__ = ["ReplayEngine", "ReplayMiss"]


class ReplayMiss(LookupError):
    """The surface holds no row for this configuration (or for one of its levels)."""


@dataclass
class ReplayEngine:
    surface: Surface

    @classmethod
    def open(cls, path: str | Path) -> ReplayEngine:
        return cls(read_surface(path))

    def measure(
        self, config: dict[str, Any], levels: list[tuple[str, int]]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The recorded measurements of ``config`` at ``levels``, in that order, and the
        launch facts (start-up time, KV-cache tokens, peak RSS, greedy match)."""
        pt = self.surface.lookup(config)
        if pt is None:
            raise ReplayMiss(f"configuration {config} is not in the surface {self.surface.path}")
        if pt.state == "fail":
            reason = pt.fail_reason if pt.fail_reason in FAIL_REASONS else "crash"
            raise EngineLaunchError(
                reason,  # type: ignore[arg-type]
                f"recorded failure ({pt.fail_reason}) in {self.surface.path}",
                pt.fail_detail or "",
            )
        out = []
        for wl, level in levels:
            m = pt.measurements.get((wl, level))
            if m is None:
                raise ReplayMiss(
                    f"configuration {config} has no recorded point for workload {wl} at "
                    f"concurrency {level} in {self.surface.path}"
                )
            out.append({**m, "replay": str(self.surface.path)})
        extra = {
            "startup_s": pt.startup_s,
            "kv_cache_tokens": pt.kv_cache_tokens,
            "peak_rss_mb": pt.peak_rss_mb,
            "lossless_match_rate": pt.lossless_match_rate,
            "log_path": None,
        }
        return out, extra
