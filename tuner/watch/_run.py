"""Scraping a server for one window: the CLI's ``watch`` and the service's poller share it.

``Scraper`` keeps the scrapes of the window in progress; ``next_window`` is one whole
window (from the last scrape, one every ``sample_s``, the end ``interval_s`` after it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from urllib.parse import urlsplit

from tuner.engines import ServedModel, ServerSnapshot, read_server, served_models
from tuner.metrics import LoadError
from tuner.watch._assess import assess
from tuner.watch._model import WatchedJob
from tuner.watch._result import WatchResult
from tuner.watch._window import window_of

__all__ = ["Scraper", "check_url", "next_window"]


def check_url(url: str) -> str:
    """The server's base URL; ValueError naming ``url`` when it is not http(s)://HOST:PORT."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # a bad port raises here
    except ValueError as e:
        raise ValueError(f"url: {url!r} is not a URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url: {url!r} must be http://HOST:PORT or https://HOST:PORT")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"url: {url!r} must be the server's base URL, without a path")
    return url.rstrip("/")


class Scraper:
    """The scrapes of one server's window in progress."""

    def __init__(self, url: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = check_url(url)
        self.clock = clock
        self.scrapes: list[tuple[float, ServerSnapshot]] = []
        self.served: list[ServedModel] | None = None
        self.served_error: str | None = None
        self.missed: list[str] = []  # why scrapes inside the window failed
        self.last_failed = False

    async def scrape(self) -> None:
        """One more scrape (the first also reads ``/v1/models``). LoadError when the first
        cannot be read; a later failure is kept (``missed``): the server may be restarting,
        and a window with a gap cannot say what its counters did in it."""
        try:
            snap = await read_server(self.url)
        except LoadError as e:
            if not self.scrapes:
                raise
            self.missed.append(str(e))
            self.last_failed = True
            return
        self.last_failed = False
        self.scrapes.append((self.clock(), snap))
        if self.served is None and self.served_error is None:
            try:
                self.served = await served_models(self.url)
            except LoadError as e:
                self.served_error = str(e)

    @property
    def seconds(self) -> float:
        return self.scrapes[-1][0] - self.scrapes[0][0] if self.scrapes else 0.0

    def result(self, model: WatchedJob) -> WatchResult:
        """The window so far; the next window starts at its last scrape. LoadError when the
        window's last scrape failed (there is no end to read)."""
        if self.last_failed or len(self.scrapes) < 2:
            raise LoadError(f"/metrics unreadable at the window's end: {self.missed[-1:]}")
        w = window_of(self.scrapes)
        if self.missed and w.reset is None:
            w = replace(
                w,
                spec=None,
                reset=f"the server could not be read at {len(self.missed)} scrape(s) inside "
                f"the window ({self.missed[-1]}): it may have restarted in between",
            )
        r = assess(model, self.url, w, self.scrapes[-1][1], self.served, self.served_error)
        self.scrapes = self.scrapes[-1:]
        self.missed = []
        return r


async def next_window(
    s: Scraper, model: WatchedJob, interval_s: float, sample_s: float = 1.0
) -> WatchResult:
    """The next window of ``interval_s`` seconds on ``s`` (from its last scrape, or from a
    first one now); LoadError when the server cannot be read at its start or end."""
    if not s.scrapes:
        await s.scrape()
    end = s.scrapes[0][0] + interval_s
    while (left := end - s.clock()) > 0:
        await asyncio.sleep(min(sample_s, left))
        await s.scrape()
    return s.result(model)
