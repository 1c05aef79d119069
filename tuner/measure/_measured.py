"""What measuring one configuration gave, as one typed value from the measurer to the trial.

Before it, a measurer returned ``(measurements, extra)`` and every reader of ``extra`` guessed
its keys; a misspelt key was a silent ``None``. The points stay dicts (they are stored and
served as JSON, and their metrics are the load generator's); the launch facts are fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from tuner.space import SearchSpace

__all__ = ["Measured"]


@dataclass(frozen=True)
class Measured:
    """The measured points (the objective point first) and what the launch reported.

    ``reused_from``: the earlier trial whose numbers these are (no launch). A field left
    ``None`` was not measured: the store keeps it empty."""

    points: list[dict[str, Any]] = field(default_factory=list)
    startup_s: float | None = None
    log_path: str | None = None
    kv_cache_tokens: int | None = None
    peak_rss_mb: float | None = None
    greedy_token_ids: list[list[int] | None] | None = None
    lossless_match_rate: float | None = None
    # The distribution check's continuations (a baseline's are the job's reference) and the
    # candidate's p-value against the baseline's.
    sampled_token_ids: list[list[list[int]] | None] | None = None
    lossless_p_value: float | None = None
    # A baseline's prompt and greedy output ids of the workload ([prompt, output] each):
    # what proposers are priced on offline.
    token_sequences: list[list[list[int]]] | None = None
    reused_from: int | None = None

    def primary(self, space: SearchSpace) -> dict[str, Any]:
        """The point at the space's objective workload and concurrency."""
        key = (space.primary_workload, space.primary_concurrency)
        return next(m for m in self.points if (m["workload"], m["concurrency"]) == key)

    def stored_extra(self) -> dict[str, Any]:
        """The launch facts by the names the trial table (``Store.store_results``), the
        dashboard attributes and the MLflow record read them under."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "points"}
