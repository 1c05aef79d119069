"""What an engine tells us besides its completions: acceptance and queue time over a measured
window, a prefix-cache reset, greedy token ids, and the KV capacity from its start log.

``EngineProbe`` is the neutral base: an endpoint that exposes none of it (a hosted API). Each
engine's probe (``VLLMProbe``, ``SGLangProbe``) overrides what its server offers. Probes hold
no state between calls; one instance serves every server of its engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import aiohttp

from tuner.metrics import GREEDY, LoadError, WindowReading

__all__ = ["EngineProbe", "HostedProbe", "fetch_metrics_text", "get_text"]


async def get_text(base_url: str, path: str) -> tuple[int, str]:
    """(HTTP status, body) of one GET to the engine; LoadError when unreachable."""
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(
                base_url.rstrip("/") + path, timeout=aiohttp.ClientTimeout(total=10)
            ) as r:
                return r.status, await r.text()
    except (aiohttp.ClientError, TimeoutError) as e:
        raise LoadError(f"{path} unreachable: {e}") from e


async def fetch_metrics_text(base_url: str) -> str:
    """The engine's Prometheus ``/metrics`` text; LoadError when it cannot be read."""
    status, body = await get_text(base_url, "/metrics")
    if status != 200:
        raise LoadError(f"/metrics answered HTTP {status}")
    return body


class EngineProbe:
    """An endpoint that exposes nothing beyond its completions: no counters, no queue time,
    no cache reset, no token ids, no KV capacity. Engines override what they offer."""

    kind: ClassVar[str] = "none"
    # POST path that empties the prefix cache; None: the endpoint offers none.
    reset_path: ClassVar[str | None] = None
    # POST path answering greedy token ids; None: the endpoint offers none.
    greedy_path: ClassVar[str | None] = None

    @asynccontextmanager
    async def window(self, base_url: str) -> AsyncIterator[WindowReading]:
        """Wraps one measured window; the reading is filled when the window closes."""
        yield WindowReading()

    async def reset_prefix_cache(self, base_url: str) -> bool:
        """Empty the engine's prefix cache so one level's prompts do not warm the next's;
        False when the engine does not offer it."""
        if self.reset_path is None:
            return False
        try:
            async with aiohttp.ClientSession() as s:
                async with s.post(
                    base_url.rstrip("/") + self.reset_path,
                    timeout=aiohttp.ClientTimeout(total=30),
                ) as r:
                    return r.status == 200
        except aiohttp.ClientError:
            return False

    def _ids_body(
        self, model: str, prompt: str, max_tokens: int, sampling: dict[str, Any], n: int, seed: int
    ) -> dict[str, Any]:
        """The request for ``n`` continuations of ``prompt`` as token ids."""
        raise NotImplementedError

    def _ids_of(self, answer: Any) -> list[Any]:
        """The continuations' token ids in an answer, in sample order."""
        raise NotImplementedError

    async def _answers(
        self,
        base_url: str,
        bodies: Sequence[dict[str, Any]],
        timeout_s: float,
        headers: dict[str, str] | None,
        concurrency: int = 1,
    ) -> list[Any | None]:
        """Each body POSTed to the ids endpoint, ``concurrency`` at a time (one by default:
        a batch can change greedy outputs at near-ties); its JSON answer, None on failure."""
        url = base_url.rstrip("/") + str(self.greedy_path)
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(session: aiohttp.ClientSession, body: dict[str, Any]) -> Any | None:
            async with gate:
                try:
                    async with session.post(
                        url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)
                    ) as r:
                        return await r.json() if r.status == 200 else None
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    return None

        async with aiohttp.ClientSession(headers=headers) as session:
            return list(await asyncio.gather(*(one(session, b) for b in bodies)))

    async def token_ids(
        self,
        base_url: str,
        model: str,
        prompts: Sequence[str],
        max_tokens: int,
        *,
        sampling: dict[str, Any] | None = None,
        n: int = 1,
        seeds: Sequence[int] | None = None,
        timeout_s: float = 120,
        headers: dict[str, str] | None = None,
    ) -> list[list[list[int]] | None]:
        """``n`` continuations of each prompt as token ids, under ``sampling`` (greedy when
        None); prompt i's request takes ``seeds[i]`` (its samples that seed plus their
        index). None for a prompt whose request failed, and for every prompt when the
        endpoint does not return token ids."""
        if self.greedy_path is None:
            return [None for _ in prompts]
        s = dict(sampling or GREEDY)
        bodies = [
            self._ids_body(model, p, max_tokens, s, n, seeds[i] if seeds else 0)
            for i, p in enumerate(prompts)
        ]
        out: list[list[list[int]] | None] = []
        for answer in await self._answers(base_url, bodies, timeout_s * n, headers):
            try:
                got = [[int(t) for t in ids] for ids in self._ids_of(answer)] if answer else []
            except (KeyError, ValueError, TypeError):
                got = []
            out.append(got if len(got) == n else None)
        return out

    def _prompt_ids_of(self, answer: Any) -> list[int] | None:
        """The prompt's token ids as the engine tokenized it; None when it does not say."""
        return None

    async def token_sequences(
        self,
        base_url: str,
        model: str,
        prompts: Sequence[str],
        max_tokens: int,
        timeout_s: float = 120,
        headers: dict[str, str] | None = None,
        concurrency: int = 1,
    ) -> list[tuple[list[int], list[int]] | None]:
        """(prompt ids, greedy output ids) of each prompt, as the engine tokenized and
        answered it: what proposers are priced on offline (any greedy output serves, so
        the requests may share batches). None for a prompt whose request failed, and for
        every prompt when the engine does not return both."""
        if self.greedy_path is None:
            return [None for _ in prompts]
        bodies = [self._ids_body(model, p, max_tokens, dict(GREEDY), 1, 0) for p in prompts]
        out: list[tuple[list[int], list[int]] | None] = []
        for answer in await self._answers(base_url, bodies, timeout_s, headers, concurrency):
            try:
                got = self._ids_of(answer) if answer else []
                prompt_ids = self._prompt_ids_of(answer) if answer else None
                if prompt_ids is None or len(got) != 1:
                    out.append(None)
                    continue
                out.append(([int(t) for t in prompt_ids], [int(t) for t in got[0]]))
            except (KeyError, ValueError, TypeError):
                out.append(None)
        return out

    async def greedy_token_ids(
        self,
        base_url: str,
        model: str,
        prompts: Sequence[str],
        max_tokens: int,
        timeout_s: float = 120,
        headers: dict[str, str] | None = None,
    ) -> list[list[int] | None]:
        """Greedy continuations as token ids (None for a request that failed, and for every
        prompt when the endpoint does not return token ids)."""
        got = await self.token_ids(
            base_url, model, prompts, max_tokens, timeout_s=timeout_s, headers=headers
        )
        return [g[0] if g else None for g in got]

    def kv_cache_tokens(self, log_text: str) -> int | None:
        """The KV-cache capacity (tokens) the engine reported in its start log."""
        return None


class HostedProbe(EngineProbe):
    """A hosted OpenAI-compatible endpoint: only what the client sees is measured."""

    kind: ClassVar[str] = "hosted"
