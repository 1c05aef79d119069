"""Batch size against offered load: the running batch and the classes of ``max_num_seqs``.

Why: an engine runs at most ``max_num_seqs`` requests at once; the rest wait in its queue.
At a closed-loop concurrency c the running batch is therefore min(c, max_num_seqs), and that
-- not the client count -- is what a step costs and what speculation's benefit depends on;
the requests beyond it add their queue wait to TTFT. Two values of ``max_num_seqs`` that give
the same running batch at every concurrency level of a space cannot be told apart by any
measured level (they differ only in the memory the engine reserves): one class. Values that
give a different running batch at some level are a real axis (the queueing trade-off under
a TTFT SLO), never collapsed.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "batch_class",
    "batch_classes",
    "objective_max_num_seqs",
    "running_batch",
]


def running_batch(max_num_seqs: int, concurrency: int) -> int:
    """Requests the engine runs at once under ``concurrency`` closed-loop clients."""
    return min(int(max_num_seqs), int(concurrency))


def batch_class(max_num_seqs: int, levels: Sequence[int]) -> tuple[int, ...]:
    """The running batch at each of ``levels``: equal tuples, one class."""
    return tuple(running_batch(max_num_seqs, c) for c in levels)


def batch_classes(values: Sequence[int], levels: Sequence[int]) -> list[list[int]]:
    """The ``max_num_seqs`` values grouped by class, each class's members ascending (its
    first is the member launched: the least reserved memory leaves the KV cache the most),
    classes by their smallest member."""
    by: dict[tuple[int, ...], list[int]] = {}
    for s in sorted(values):
        by.setdefault(batch_class(s, levels), []).append(s)
    return sorted(by.values(), key=lambda members: members[0])


def objective_max_num_seqs(values: Sequence[int], levels: Sequence[int], objective: int) -> int:
    """The ``max_num_seqs`` the search launches at by default: the smallest member of the
    class whose running batch at the ``objective`` level is largest (ties: the largest
    running batch at the other levels, so the least queueing). When every value is at least
    the highest level this is the smallest value, as before batch classes."""
    best = max(
        batch_classes(values, levels),
        key=lambda m: (running_batch(m[0], objective), batch_class(m[0], levels)),
    )
    return best[0]
