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
from tuner.workloads import Message, Prompt, as_messages

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
    # POST path answering token ids of a text or token-id prompt; None: the endpoint offers
    # none.
    greedy_path: ClassVar[str | None] = None
    # POST path answering a chat request with the templated prompt's and the continuations'
    # token ids; None: none (chat workloads then go without the ids checks).
    chat_path: ClassVar[str | None] = None

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
        self,
        model: str,
        prompt: str | list[int],
        max_tokens: int,
        sampling: dict[str, Any],
        n: int,
        seed: int,
    ) -> dict[str, Any]:
        """The request for ``n`` continuations of a text (or token-id) prompt as token ids."""
        raise NotImplementedError

    def _chat_body(
        self,
        model: str,
        messages: list[dict[str, str]],
        max_tokens: int,
        sampling: dict[str, Any],
        n: int,
        seed: int,
    ) -> dict[str, Any]:
        """The chat request for ``n`` continuations of ``messages``, templated by the engine,
        answered with the templated prompt's and the continuations' token ids."""
        raise NotImplementedError

    def _ids_of(self, answer: Any) -> list[Any]:
        """The continuations' token ids in an answer, in sample order."""
        raise NotImplementedError

    def _text_of(self, answer: Any) -> str | None:
        """A chat answer's reply text (what the next turn carries as the model's own)."""
        return None

    def _request(
        self,
        model: str,
        prompt: Prompt,
        max_tokens: int,
        sampling: dict[str, Any],
        n: int,
        seed: int,
        extra: dict[str, Any],
        messages: list[Message] | None = None,
    ) -> tuple[str, dict[str, Any]] | None:
        """(path, body) asking for ids of ``prompt`` (a conversation: of ``messages``, its
        first turn by default); None when this endpoint cannot answer it with ids."""
        if prompt.chat:
            if self.chat_path is None:
                return None
            msgs = as_messages(messages if messages is not None else prompt.messages)
            body = self._chat_body(model, msgs, max_tokens, sampling, n, seed)
            return self.chat_path, extra | body
        if self.greedy_path is None:
            return None
        return self.greedy_path, self._ids_body(
            model, prompt.prompt, max_tokens, sampling, n, seed
        )

    async def _post(
        self, session: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout_s: float
    ) -> Any | None:
        """One POST's JSON answer; None on any failure."""
        try:
            async with session.post(
                url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as r:
                return await r.json() if r.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def _answers(
        self,
        base_url: str,
        requests: Sequence[tuple[str, dict[str, Any]] | None],
        timeout_s: float,
        headers: dict[str, str] | None,
        concurrency: int = 1,
    ) -> list[Any | None]:
        """Each (path, body) POSTed, ``concurrency`` at a time (one by default: a batch can
        change greedy outputs at near-ties); its JSON answer, None on failure or for None."""
        if all(r is None for r in requests):
            return [None for _ in requests]  # nothing this endpoint can answer: no connection
        root = base_url.rstrip("/")
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(session: aiohttp.ClientSession, req: Any) -> Any | None:
            if req is None:
                return None
            async with gate:
                return await self._post(session, root + req[0], req[1], timeout_s)

        async with aiohttp.ClientSession(headers=headers) as session:
            return list(await asyncio.gather(*(one(session, r) for r in requests)))

    async def token_ids(
        self,
        base_url: str,
        model: str,
        prompts: Sequence[Prompt],
        max_tokens: int,
        *,
        sampling: dict[str, Any] | None = None,
        n: int = 1,
        seeds: Sequence[int] | None = None,
        timeout_s: float = 120,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> list[list[list[int]] | None]:
        """``n`` continuations of each prompt (a conversation's first turn, through the chat
        template) as token ids, under ``sampling`` (greedy when None); prompt i's request
        takes ``seeds[i]`` (its samples that seed plus their index). None for a prompt whose
        request failed or that the endpoint cannot answer with token ids."""
        s = dict(sampling or GREEDY)
        reqs = [
            self._request(model, p, max_tokens, s, n, seeds[i] if seeds else 0, extra or {})
            for i, p in enumerate(prompts)
        ]
        out: list[list[list[int]] | None] = []
        for answer in await self._answers(base_url, reqs, timeout_s * n, headers):
            try:
                got = [[int(t) for t in ids] for ids in self._ids_of(answer)] if answer else []
            except (KeyError, ValueError, TypeError):
                got = []
            out.append(got if len(got) == n else None)
        return out

    def _prompt_ids_of(self, answer: Any) -> list[int] | None:
        """The prompt's token ids as the engine tokenized it; None when it does not say."""
        return None

    def _sequence(self, answer: Any) -> tuple[list[int], list[int], str | None] | None:
        """(prompt ids, output ids, reply text) of a one-continuation answer, or None."""
        try:
            got = self._ids_of(answer) if answer else []
            prompt_ids = self._prompt_ids_of(answer) if answer else None
            if prompt_ids is None or len(got) != 1:
                return None
            return [int(t) for t in prompt_ids], [int(t) for t in got[0]], self._text_of(answer)
        except (KeyError, ValueError, TypeError):
            return None

    async def _turn_ids(
        self,
        session: aiohttp.ClientSession,
        root: str,
        model: str,
        prompt: Prompt,
        limit: int,
        depth: int,
        timeout_s: float,
        extra: dict[str, Any],
        sampling: dict[str, Any] | None = None,
        seed: int = 0,
    ) -> list[tuple[list[int], list[int], int]] | None:
        """Every turn of one entry as (prompt ids, output ids, the turn's limit), greedy or
        under ``sampling``. A conversation's turn asks for exactly ``limit`` tokens, whose
        text the next turn carries as the model's own reply, then ``depth`` more through the
        completions endpoint on its very prompt and output ids (nothing re-tokenised); the
        last turn asks for them at once."""
        s = dict(sampling or GREEDY)
        messages = list(prompt.messages)
        out: list[tuple[list[int], list[int], int]] = []
        text: str | None = None
        for turn in range(prompt.turns):
            if turn:
                messages += [("assistant", text or ""), ("user", prompt.followups[turn - 1])]
            last = turn == prompt.turns - 1
            ask = limit + (depth if last else 0)
            req = self._request(model, prompt, ask, dict(s), 1, seed + turn, extra, messages)
            if req is None:
                return None
            got = self._sequence(await self._post(session, root + req[0], req[1], timeout_s))
            if got is None:
                return None
            prompt_ids, output, text = got
            if not last and depth:
                if self.greedy_path is None or text is None:
                    return None
                body = self._ids_body(model, prompt_ids + output, depth, dict(s), 1, seed + turn)
                more = await self._post(session, root + self.greedy_path, body, timeout_s)
                ids = self._ids_of(more) if more else []
                if len(ids) != 1:
                    return None
                output = output + [int(t) for t in ids[0]]
            out.append((prompt_ids, output, limit))
        return out

    async def token_sequences(
        self,
        base_url: str,
        model: str,
        prompts: Sequence[Prompt],
        limits: Sequence[int],
        depth: int,
        timeout_s: float = 120,
        headers: dict[str, str] | None = None,
        concurrency: int = 1,
        extra: dict[str, Any] | None = None,
        sampling: dict[str, Any] | None = None,
        draws: int = 1,
    ) -> list[list[tuple[list[int], list[int], int]] | None]:
        """Each prompt's requests (a conversation's turns) as (prompt ids, output ids, the
        request's max_tokens), as the engine tokenized and answered them, the output
        ``depth`` tokens past the limit (the last round's drafts are judged too): what
        proposers are priced on offline (any greedy output serves, so prompts may share
        batches; under ``sampling``, the baseline's samples are draws of the very
        distribution a lossless engine serves, ``draws`` of each prompt: draw d of prompt i
        of n seeds its requests from (d * n + i) * 1000, so a job run again prices the same
        draws; the list is then draw-major, ``draws`` * n long). None for a prompt whose
        requests failed or that the endpoint cannot answer with token ids."""
        able = [self._request(model, p, 1, dict(GREEDY), 1, 0, {}) is not None for p in prompts]
        if not any(able):
            return [None for _ in prompts]
        root = base_url.rstrip("/")
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(session: aiohttp.ClientSession, i: int, p: Prompt, limit: int) -> Any:
            if self._request(model, p, 1, dict(GREEDY), 1, 0, {}) is None:
                return None
            async with gate:
                return await self._turn_ids(
                    session,
                    root,
                    model,
                    p,
                    limit,
                    depth,
                    timeout_s,
                    extra or {},
                    sampling,
                    i * 1000,
                )

        rounds = max(1, draws) if sampling else 1
        jobs = [
            (d * len(prompts) + i, p, n)
            for d in range(rounds)
            for i, (p, n) in enumerate(zip(prompts, limits, strict=True))
        ]
        async with aiohttp.ClientSession(headers=headers) as session:
            return list(await asyncio.gather(*(one(session, j, p, n) for j, p, n in jobs)))

    async def greedy_token_ids(
        self,
        base_url: str,
        model: str,
        prompts: Sequence[Prompt],
        max_tokens: int,
        timeout_s: float = 120,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> list[list[int] | None]:
        """Greedy continuations as token ids (None for a request that failed, and for every
        prompt the endpoint cannot answer with token ids)."""
        got = await self.token_ids(
            base_url,
            model,
            prompts,
            max_tokens,
            timeout_s=timeout_s,
            headers=headers,
            extra=extra,
        )
        return [g[0] if g else None for g in got]

    def kv_cache_tokens(self, log_text: str) -> int | None:
        """The KV-cache capacity (tokens) the engine reported in its start log."""
        return None


class HostedProbe(EngineProbe):
    """A hosted OpenAI-compatible endpoint: only what the client sees is measured."""

    kind: ClassVar[str] = "hosted"
