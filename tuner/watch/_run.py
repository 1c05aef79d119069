"""Scraping a server for one window: the CLI's ``watch`` and the service's poller share it.

``Scraper`` keeps the scrapes of the window in progress; ``watch_window`` is one whole
window (a scrape now, one every ``sample_s``, the last ``interval_s`` after the first).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from tuner.engines import ServedModel, ServerSnapshot, read_server, served_models
from tuner.metrics import LoadError
from tuner.watch._assess import assess
from tuner.watch._model import JobModel
from tuner.watch._result import WatchResult
from tuner.watch._window import window_of

__all__ = ["Scraper", "check_url", "watch_window"]


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

    async def scrape(self) -> None:
        """One more scrape (the first also reads ``/v1/models``); LoadError when the
        server cannot be read."""
        snap = await read_server(self.url)
        self.scrapes.append((self.clock(), snap))
        if self.served is None and self.served_error is None:
            try:
                self.served = await served_models(self.url)
            except LoadError as e:
                self.served_error = str(e)

    @property
    def seconds(self) -> float:
        return self.scrapes[-1][0] - self.scrapes[0][0] if self.scrapes else 0.0

    def result(self, model: JobModel) -> WatchResult:
        """The window so far; the next window starts at its last scrape."""
        r = assess(
            model,
            self.url,
            window_of(self.scrapes),
            self.scrapes[-1][1],
            self.served,
            self.served_error,
        )
        self.scrapes = self.scrapes[-1:]
        return r


async def watch_window(
    model: JobModel, url: str, interval_s: float, sample_s: float = 1.0
) -> WatchResult:
    """One window of ``interval_s`` seconds; LoadError when the server cannot be read."""
    s = Scraper(url)
    await s.scrape()
    end = s.scrapes[0][0] + interval_s
    while (left := end - s.clock()) > 0:
        await asyncio.sleep(min(sample_s, left))
        await s.scrape()
    return s.result(model)
