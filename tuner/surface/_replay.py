"""The replay measurer: answers a trial from a recorded surface instead of launching an engine.

For benchmarking the search only. It is never the default (``engine.kind: replay`` must be
asked for), every measurement it returns carries ``"replay": <surface path>``, and a job that
used it refuses to export a winner. The numbers are real, but they were measured by the job
that recorded the surface, not by this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.engines import FAIL_REASONS, EngineConfig, EngineLaunchError
from tuner.measure import (
    LosslessCheck,
    Measured,
    Measurer,
    OnLaunch,
    PruneCheck,
    Pruned,
    TrialFailed,
    point_order,
)
from tuner.space import SearchSpace
from tuner.states import TrialState
from tuner.surface._format import Surface, read_surface

__all__ = ["ReplayEngine", "ReplayMeasurer", "ReplayMiss"]


class ReplayMiss(LookupError):
    """The surface holds no row for this configuration (or for one of its levels)."""


@dataclass
class ReplayEngine:
    surface: Surface

    @classmethod
    def open(cls, path: str | Path, name: str | None = None) -> ReplayEngine:
        """``name``: the file as messages show it (a job's error reaches API clients, who
        must not learn where the server keeps its files)."""
        return cls(read_surface(path, name))

    def measure(self, config: dict[str, Any], levels: list[tuple[str, int]]) -> Measured:
        """The recorded measurements of ``config`` at ``levels``, in that order, and the
        launch facts (start-up time, KV-cache tokens, peak RSS, greedy match)."""
        pt = self.surface.lookup(config)
        if pt is None:
            raise ReplayMiss(f"configuration {config} is not in the surface {self.surface.name}")
        if pt.state == TrialState.FAIL:
            reason = pt.fail_reason if pt.fail_reason in FAIL_REASONS else "crash"
            raise EngineLaunchError(
                reason,  # type: ignore[arg-type]
                f"recorded failure ({pt.fail_reason}) in {self.surface.name}",
                pt.fail_detail or "",
            )
        out = []
        for wl, level in levels:
            m = pt.measurements.get((wl, level))
            if m is None:
                raise ReplayMiss(
                    f"configuration {config} has no recorded point for workload {wl} at "
                    f"concurrency {level} in {self.surface.name}"
                )
            out.append({**m, "replay": str(self.surface.path)})
        return Measured(
            out,
            startup_s=pt.startup_s,
            kv_cache_tokens=pt.kv_cache_tokens,
            peak_rss_mb=pt.peak_rss_mb,
            lossless_match_rate=pt.lossless_match_rate,
        )


class ReplayMeasurer(Measurer):
    """A job's measurer when ``engine.kind`` is replay: a recorded surface, no engine."""

    live = False

    def __init__(self, space: SearchSpace, on_launch: OnLaunch) -> None:
        self.space, self.on_launch = space, on_launch
        self._engine: ReplayEngine | None = None

    def measure(
        self,
        cfg: EngineConfig,
        params: dict[str, Any],
        log_path: Path,
        *,
        prune: PruneCheck | None = None,
        lossless: LosslessCheck | None = None,
        confirm: bool = False,
    ) -> Measured:
        if self._engine is None:
            written = self.space.engine.surface or ""
            self._engine = ReplayEngine.open(self.space.resolve(written), written)
        try:
            got = self._engine.measure(params, point_order(self.space))
        except ReplayMiss as e:
            raise TrialFailed("not_recorded", str(e)) from None
        except EngineLaunchError as e:
            raise TrialFailed(e.reason, f"{e.message}\n{e.log_tail}") from None
        self.on_launch(got.startup_s or 0.0, confirm)
        if prune is not None:
            evidence = prune(got.points[0])  # levels start with the objective point
            if evidence is not None:
                kept = Measured(
                    got.points[:1], startup_s=got.startup_s, kv_cache_tokens=got.kv_cache_tokens
                )
                raise Pruned(evidence, kept)
        return got
