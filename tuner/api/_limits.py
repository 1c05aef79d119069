"""Request limits as pure ASGI middleware: body size (413) and a per-client rate (429).

Pure ASGI so a refused request costs nothing downstream: the body is counted before FastAPI
parses (and buffers) it, and a client over its rate never reaches a route or the database.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tuner.api._errors import problem

__all__ = ["BodyLimit", "RateLimit", "TokenBucket"]

# Buckets kept at most; past it, full (idle) ones are dropped first, so a flood of client
# addresses cannot grow memory without bound.
MAX_CLIENTS = 10_000


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


class BodyLimit:
    """413 for a request body over ``max_bytes``, whether or not it declares its length."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(scope, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await self._too_large(scope, send)
                return
            chunks.append(body)
            more = msg.get("more_body", False)
        buffered = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": buffered, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        resp = problem(
            413, f"request body over {self.max_bytes} bytes", instance=scope.get("path")
        )
        await resp({"type": "http"}, _no_receive, send)


class TokenBucket:
    """Per-key token buckets: ``rate`` tokens a second up to ``burst``; thread-safe."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0 when the request may go ahead, else the seconds until it may."""
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                wait = 0.0
            else:
                self._buckets[key] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
            if len(self._buckets) > MAX_CLIENTS:
                self._prune(now)
            return wait

    def _prune(self, now: float) -> None:
        full = [
            k
            for k, (t, last) in self._buckets.items()
            if t + (now - last) * self.rate >= self.burst
        ]
        for k in full or list(self._buckets)[: len(self._buckets) // 2]:
            del self._buckets[k]


def _client_key(scope: Scope) -> str:
    """The peer address. Not the bearer token: any string passes as one before auth looks at
    it, so a client could mint a fresh budget per request."""
    client = scope.get("client")
    return client[0] if client else "unknown"


class RateLimit:
    """429 with ``Retry-After`` for a client past its rate on ``/api``; health, readiness,
    metrics and the static UI are not counted."""

    def __init__(self, app: ASGIApp, rate: float, burst: int) -> None:
        self.app = app
        self.bucket = TokenBucket(rate, burst) if rate > 0 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.bucket is None
            or scope["type"] != "http"
            or not str(scope.get("path", "")).startswith("/api/")
        ):
            await self.app(scope, receive, send)
            return
        wait = self.bucket.take(_client_key(scope))
        if wait <= 0:
            await self.app(scope, receive, send)
            return
        retry = max(1, math.ceil(wait))
        resp = problem(
            429,
            f"rate limit: at most {self.bucket.rate:g} requests a second "
            f"(burst {self.bucket.burst}); retry in {retry} s",
            instance=scope.get("path"),
            headers={"Retry-After": str(retry)},
        )
        await resp({"type": "http"}, _no_receive, send)
