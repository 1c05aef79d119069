"""A job's trials as the search reads them: once per trial, not once per question.

Why: before a trial the strategy proposes, then asks for the proposal's class member and its
prediction; each question read every trial row with its measurements and rebuilt the
families' memory shares. Now one read serves them all until the job's trials change (a row
added or its state written, ``Store.trials_version``: one cheap count per question).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tuner.search._guide import family_memory
from tuner.space import SearchSpace
from tuner.storage import Store, TrialModel

__all__ = ["JobTrials", "TrialSnapshot"]


@dataclass(frozen=True)
class TrialSnapshot:
    """Every trial row of a job (running ones too, by number) as read at one moment, and
    what the search derives from them."""

    version: tuple[int, int, datetime | None]
    rows: list[TrialModel]
    memory: Callable[[dict[str, Any]], float]  # a proposer family's memory share

    @property
    def launched(self) -> list[TrialModel]:
        """The rows that launched an engine (not reused from an earlier trial)."""
        return [r for r in self.rows if r.reused_from is None]

    def measured(self) -> list[tuple[dict[str, Any], int | None]]:
        """(params, KV cache tokens) of each launch: what ``canonical`` decides classes by."""
        return [(dict(r.params), r.kv_cache_tokens) for r in self.launched]


class JobTrials:
    """The current ``TrialSnapshot`` of one job, read again only when its trials changed."""

    def __init__(
        self, store: Store, job_id: int, space: SearchSpace, need: Callable[[], int | None]
    ) -> None:
        self.store, self.job_id, self.space = store, job_id, space
        self._need = need  # KV tokens the workload needs, read on first use
        self._snap: TrialSnapshot | None = None

    def current(self) -> TrialSnapshot:
        # The version first: a change between the two reads then only costs a re-read.
        version = self.store.trials_version(self.job_id)
        if self._snap is None or self._snap.version != version:
            rows = self.store.trials(self.job_id)
            memory = family_memory(self.space, rows, self._need())
            self._snap = TrialSnapshot(version, rows, memory)
        return self._snap
