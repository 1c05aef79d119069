"""Which baseline a speculative configuration is compared with: the same target without
speculation at the same batch class.

Why: an engine runs min(concurrency, max_num_seqs) requests at once and queues the rest
(``tuner.space._batch``). A configuration launched with a ``max_num_seqs`` below a level
queues there; compared with a baseline that does not, its verdict would price the queue as
speculation's cost (or gain). So every verdict divides by the baseline of its own class
(the same running batch at every level) when the job measured one, and says which baseline
that was; only a class with no baseline of its own falls back to the objective class's
baseline, and each level then says whether the running batches still agree there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.space import batch_class, objective_max_num_seqs, running_batch

__all__ = ["LATENCY_LIMITS", "QUEUE_FLOOR_MS", "Baselines", "latency_decides", "queued"]

LATENCY_LIMITS = ("p99_ttft_ms", "p99_e2e_ms")  # SLO limits that queueing moves
# vLLM reports a queue wait of 0.03-0.05 ms when nothing queues (its scheduler's own latency,
# measured on the tiny CPU pair at concurrency 1 and 4 with max_num_seqs 4): under 1 ms a
# request did not wait for a slot.
QUEUE_FLOOR_MS = 1.0


def queued(metrics: Mapping[str, Any], max_num_seqs: int | None) -> bool:
    """Whether a point's requests waited in the engine's queue: its batch size is below its
    concurrency, or the engine reported a mean queue wait of ``QUEUE_FLOOR_MS`` or more."""
    c = metrics.get("concurrency")
    if max_num_seqs is not None and c is not None and int(max_num_seqs) < int(c):
        return True
    return float(metrics.get("mean_queue_ms") or 0.0) >= QUEUE_FLOOR_MS


def latency_decides(
    slo: Mapping[str, float],
    measured: Mapping[int, Mapping[int, Mapping[str, Any]]],
    seqs: Mapping[int, int],
) -> bool:
    """Whether TTFT and end-to-end decide a report, so it shows them per level: the SLO
    limits p99 TTFT or p99 end-to-end, or some point queued (``queued``). ``measured``:
    trial -> level -> metrics; ``seqs``: trial -> its max_num_seqs."""
    if any(k in slo for k in LATENCY_LIMITS):
        return True
    return any(queued(m, seqs.get(n)) for n, per in measured.items() for m in per.values())


@dataclass(frozen=True)
class Baselines:
    """A report's baselines: the main one (the objective class's, else the first) and the
    one each speculative trial is compared with."""

    main: int | None
    by_class: dict[tuple[int, ...], int] = field(default_factory=dict)
    seqs: dict[int, int] = field(default_factory=dict)  # trial -> its max_num_seqs
    levels: tuple[int, ...] = ()

    @classmethod
    def of(cls, rows: Iterable[Any], levels: Sequence[int], objective: int) -> Baselines:
        """From a report's launched rows (``number``, ``method``, ``params``), the space's
        concurrency levels and the objective level."""
        rows = sorted(rows, key=lambda r: r.number)
        seqs = {r.number: int(r.params.get("max_num_seqs") or 0) for r in rows}
        by_class: dict[tuple[int, ...], int] = {}
        for r in rows:
            if r.method == "none" and seqs[r.number]:
                by_class.setdefault(batch_class(seqs[r.number], levels), r.number)
        main = None
        if by_class:
            values = sorted({seqs[n] for n in by_class.values()})
            top = objective_max_num_seqs(values, levels, objective)
            main = by_class[batch_class(top, levels)]
        else:
            main = next((r.number for r in rows if r.method == "none"), None)
        return cls(main, by_class, seqs, tuple(levels))

    def for_trial(self, number: int) -> int | None:
        """The baseline trial ``number`` is compared with: its class's, else the main one."""
        s = self.seqs.get(number)
        if s:
            own = self.by_class.get(batch_class(s, self.levels))
            if own is not None:
                return own
        return self.main

    def same_batch(self, number: int, concurrency: int) -> bool | None:
        """Whether trial ``number`` and its baseline run the same batch at ``concurrency``
        (None: no baseline or an unknown batch size)."""
        base = self.for_trial(number)
        s, b = self.seqs.get(number), self.seqs.get(base) if base is not None else None
        if not s or not b:
            return None
        return running_batch(s, concurrency) == running_batch(b, concurrency)

    @property
    def all(self) -> list[int]:
        """Every class's baseline, the main one first."""
        rest = sorted(n for n in self.by_class.values() if n != self.main)
        return ([self.main] if self.main is not None else []) + rest
