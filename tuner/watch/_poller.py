"""The service's watches: one loop in the API process scrapes every registered watch's
server and stores each window's answer (``Store.record_watch``), which the UI and SpecTune's
own ``/metrics`` read.

Why one loop, not a task per watch: the watches are read from the database on every tick,
so one added or deleted by any API process is picked up or dropped within a tick, and
stopping is one task to cancel. A watch scrapes every ``min(5 s, interval_s / 6)`` (the
gauges' mean is the live concurrency) and closes a window every ``interval_s``; the next
window starts at its last scrape. A server that cannot be read is recorded as the error, the
verdict "cannot tell yet", and the window starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tuner.errors import RequestError
from tuner.metrics import LoadError
from tuner.space import SpaceError
from tuner.storage import Store, WatchInfo
from tuner.watch._model import WatchedJob, load_job_model
from tuner.watch._result import CANNOT_TELL
from tuner.watch._run import Scraper

__all__ = ["WatchPoller"]

log = logging.getLogger("spectune.watch")


@dataclass
class _State:
    info: WatchInfo
    scraper: Scraper
    model: WatchedJob | None = None
    next_scrape: float = 0.0


class WatchPoller:
    """Start with ``start()`` inside a running event loop; ``await stop()`` ends it."""

    def __init__(
        self, store: Store, tick_s: float = 1.0, allowed: Callable[[str], bool] | None = None
    ) -> None:
        self.store, self.tick_s = store, tick_s
        # Which URLs may be scraped (the service's allow-list): a watch stored before the
        # list changed is not scraped, and says why.
        self.allowed = allowed
        self.states: dict[int, _State] = {}
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run(), name="spectune-watches")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad tick (a database restart) must not end the watches
                log.exception("watch tick failed")
            await asyncio.sleep(self.tick_s)

    async def _record(self, st: _State, verdict: str | None, result, error: str | None) -> None:
        await asyncio.to_thread(
            self.store.record_watch, st.info.id, verdict=verdict, result=result, error=error
        )

    async def tick(self) -> None:
        """One pass over every watch: scrape those due, close the windows that are full."""
        found = {w.id: w for w in await asyncio.to_thread(self.store.watches)}
        for gone in set(self.states) - set(found):
            del self.states[gone]
        now = time.monotonic()
        for wid, info in found.items():
            st = self.states.get(wid)
            if st is None:
                st = self.states[wid] = _State(info, Scraper(info.url))
            if now < st.next_scrape:
                continue
            st.next_scrape = now + min(5.0, info.interval_s / 6.0)
            if self.allowed is not None and not self.allowed(info.url):
                st.next_scrape = now + info.interval_s
                why = f"{info.url}: not a host this service may scrape (SPECTUNE_WATCH_HOSTS)"
                await self._record(st, CANNOT_TELL, None, why)
                continue
            if st.model is None:
                try:
                    st.model = await asyncio.to_thread(load_job_model, self.store, info.job_id)
                except (RequestError, SpaceError, ValueError, OSError) as e:
                    st.next_scrape = now + info.interval_s  # try the job again later
                    await self._record(st, CANNOT_TELL, None, f"job {info.job_id}: {e}")
                    continue
            try:
                await st.scraper.scrape()
                if st.scraper.seconds < info.interval_s:
                    continue
                r = st.scraper.result(st.model)
            except LoadError as e:
                st.scraper = Scraper(info.url)
                await self._record(st, CANNOT_TELL, None, f"{info.url}: {e}")
                continue
            await self._record(st, r.verdict, r.model_dump(mode="json"), None)
