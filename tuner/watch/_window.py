"""A watch window: the server's counters scraped at its start, a few times inside and at its
end, turned into the window's acceptance and live concurrency.

Why several scrapes: the counters need only the first and the last, but the running and
waiting gauges are instants, so their mean over the window is the live concurrency; and a
counter lower than at the scrape before it means the server restarted in between (its
counters start again from 0), which only consecutive scrapes can show.

Too few drafts: a per-position rate from n drafts has a 95 % interval of at most
+-1.96 * 0.5 / sqrt(n); below ``MIN_DRAFTS`` = 100 that is wider than +-0.1, too wide to
move a depth, so the verdict is "cannot tell yet".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.engines import ServerSnapshot
from tuner.metrics import SpecStats, spec_delta

__all__ = ["MIN_DRAFTS", "Window", "window_of"]

MIN_DRAFTS = 100


@dataclass(frozen=True)
class Window:
    """What one window says; ``reset`` (why it cannot be read) is set when a counter went
    backwards or the server's depth changed: a restarted server."""

    seconds: float
    spec: SpecStats | None
    reset: str | None
    live_concurrency: float | None
    live_waiting: float | None
    depth: int  # per-position counters the server keeps: its num_speculative_tokens


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _went_back(a: ServerSnapshot, b: ServerSnapshot) -> str | None:
    """Why ``b`` cannot follow ``a`` on the same server run (None: it can)."""
    if a.started_at is not None and b.started_at is not None and a.started_at != b.started_at:
        return "the server process started again (its start time changed)"
    if a.positions != b.positions:
        return f"the server's drafted positions changed from {a.positions} to {b.positions}"
    pairs = [
        ("drafts", a.spec.drafts, b.spec.drafts),
        ("draft tokens", a.spec.draft_tokens, b.spec.draft_tokens),
        ("accepted tokens", a.spec.accepted, b.spec.accepted),
    ]
    pairs += [
        (f"accepted tokens at position {i + 1}", x, y)
        for i, (x, y) in enumerate(zip(a.spec.per_pos, b.spec.per_pos, strict=False))
    ]
    for name, x, y in pairs:
        if y < x:
            return f"the {name} counter fell from {x:g} to {y:g}"
    return None


def window_of(scrapes: Sequence[tuple[float, ServerSnapshot]]) -> Window:
    """The window from (monotonic seconds, snapshot) scrapes in time order (two or more)."""
    if len(scrapes) < 2:
        raise ValueError("scrapes: a window needs two scrapes or more")
    (t0, first), (t1, last) = scrapes[0], scrapes[-1]
    reset = None
    for (_, a), (_, b) in zip(scrapes, scrapes[1:], strict=False):
        if (why := _went_back(a, b)) is not None:
            reset = f"the server restarted inside the window: {why}"
            break
    spec = None if reset else spec_delta(first.spec, last.spec)
    return Window(
        seconds=t1 - t0,
        spec=spec,
        reset=reset,
        live_concurrency=_mean([s.running for _, s in scrapes]),
        live_waiting=_mean([s.waiting for _, s in scrapes]),
        depth=last.positions,
    )
