"""Async streaming load generator for an OpenAI-compatible server: raw text to
``/v1/completions``, conversations to ``/v1/chat/completions`` (the engine applies the model's
chat template), a conversation's turns one after the other with the model's own replies.

Closed loop: ``concurrency`` workers each keep one request in flight. Open loop: requests
arrive as a Poisson process at ``request_rate`` per second (seeded), whether or not earlier
ones have finished, capped at ``concurrency`` in flight. Every request carries the workload's
sampling settings (greedy, temperature 0, unless it says otherwise) and ``ignore_eos``, so each
produces exactly ``max_tokens``: measurements of different configurations then cover the same
work. Token counts come from the server's
``usage`` (a streamed chunk can carry several tokens under speculation).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from tuner.metrics import GREEDY, LoadError, Measurement, RequestResult, WindowReading, summarize
from tuner.workloads import Message, Prompt, as_messages

__all__ = [
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "LoadError",
    "Probe",
    "measure",
    "run_requests",
    "stream_completion",
]


class Probe(Protocol):
    """What ``measure`` needs from the engine under load (each engine's probe in
    ``tuner.engines`` is one): a context wrapping the measured window whose reading is
    filled when the window closes; and emptying the prefix cache between passes."""

    def window(self, base_url: str) -> AbstractAsyncContextManager[WindowReading]: ...

    async def reset_prefix_cache(self, base_url: str) -> bool: ...


COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class _Req:
    """One workload entry as it is sent: a raw text or a conversation (``Prompt``), its
    output length, the workload's sampling and, for chat, its extra request fields."""

    prompt: Prompt
    max_tokens: int
    sampling: dict[str, Any] = field(default_factory=lambda: dict(GREEDY))
    chat_extra: dict[str, Any] = field(default_factory=dict)


def _body(model: str, req: _Req, messages: Sequence[Message] | None) -> dict[str, Any]:
    common = {**req.sampling, "ignore_eos": True, "stream": True}
    common["stream_options"] = {"include_usage": True}
    if messages is None:
        return {"model": model, "prompt": req.prompt.prompt, "max_tokens": req.max_tokens} | common
    body = {"model": model, "messages": as_messages(messages)} | req.chat_extra
    return body | {"max_completion_tokens": req.max_tokens} | common


def _piece(choice: dict[str, Any], chat: bool) -> str | None:
    """The text one streamed choice carries; None for chat's role announcement (sent just
    before the first token's chunk, it is no decode step)."""
    if not chat:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    content = delta.get("content")
    if "role" in delta and not content and not choice.get("finish_reason"):
        return None
    return content or ""


async def _stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], chat: bool, timeout_s: float
) -> RequestResult:
    t0 = time.perf_counter()
    ttft = None
    last = t0
    itl: list[float] = []
    text: list[str] = []
    usage = None
    done = False
    chunks = empty = 0
    try:
        async with session.post(
            url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status != 200:
                detail = (await resp.text())[:200]
                return RequestResult(ok=False, error=f"HTTP {resp.status}: {detail}")
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        continue
                    obj = json.loads(data)
                    if "error" in obj:
                        return RequestResult(ok=False, error=f"stream error: {obj['error']}")
                    if obj.get("usage"):
                        usage = obj["usage"]
                    choices = obj.get("choices") or []
                    piece = _piece(choices[0], chat) if choices else None
                    if piece is not None:
                        # As vLLM's benchmark: every chunk with a choice is a step, whether
                        # or not its text is empty (a token can print nothing yet), and
                        # whether it carries one token or several.
                        now = time.perf_counter()
                        if ttft is None:
                            ttft = now - t0
                        else:
                            itl.append(now - last)
                        last = now
                        chunks += 1
                        empty += not piece
                        text.append(piece)
    except TimeoutError:
        return RequestResult(ok=False, error=f"timeout after {timeout_s:g} s")
    except (aiohttp.ClientError, json.JSONDecodeError) as e:
        return RequestResult(ok=False, error=f"{type(e).__name__}: {e}"[:200])
    # End-to-end ends at the last chunk with a choice, as vLLM's own benchmark counts it: the
    # usage chunk and [DONE] that follow carry no token.
    e2e = last - t0
    if not done:
        return RequestResult(ok=False, error="stream ended before [DONE]")
    if ttft is None:
        return RequestResult(ok=False, error="no tokens streamed")
    if not usage or "completion_tokens" not in usage:
        return RequestResult(ok=False, error="server sent no usage; cannot count tokens")
    return RequestResult(
        ok=True,
        output_tokens=int(usage["completion_tokens"]),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        ttft_s=ttft,
        e2e_s=e2e,
        itl_s=itl,
        text="".join(text),
        chunks=chunks,
        empty_chunks=empty,
    )


async def stream_completion(
    session: aiohttp.ClientSession, base_url: str, model: str, req: _Req, timeout_s: float
) -> list[RequestResult]:
    """Every request of one workload entry, streamed: a raw text's one request to
    ``/v1/completions``; a conversation's turns to ``/v1/chat/completions`` one after the
    other, each carrying the earlier turns with the model's own replies. A failed turn ends
    its conversation: the turns it would have led to count as failed too."""
    root = base_url.rstrip("/")
    p = req.prompt
    if not p.chat:
        return [
            await _stream(
                session, root + COMPLETIONS_PATH, _body(model, req, None), False, timeout_s
            )
        ]
    messages = list(p.messages)
    out: list[RequestResult] = []
    for turn in range(p.turns):
        if turn:
            messages += [("assistant", out[-1].text), ("user", p.followups[turn - 1])]
        r = await _stream(session, root + CHAT_PATH, _body(model, req, messages), True, timeout_s)
        out.append(r)
        if not r.ok:
            why = f"an earlier turn of its conversation failed: {r.error}"[:200]
            out += [RequestResult(ok=False, error=why) for _ in range(p.turns - turn - 1)]
            break
    return out


async def run_requests(
    base_url: str,
    model: str,
    reqs: Sequence[_Req],
    concurrency: int,
    timeout_s: float,
    *,
    request_rate: float | None = None,
    seed: int = 0,
    headers: dict[str, str] | None = None,
) -> tuple[list[RequestResult], float]:
    """Send ``reqs``; returns results in request order (a conversation's turns in turn
    order) and the wall time.

    Closed loop when ``request_rate`` is None, else Poisson arrivals at that rate (of
    conversations: a worker keeps one request of one conversation in flight).
    ``headers`` (a hosted endpoint's Authorization) go on every request, never in a result.
    """
    results: list[list[RequestResult] | None] = [None] * len(reqs)
    conn = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=conn, headers=headers) as session:
        t0 = time.perf_counter()
        if request_rate is None:
            nxt = 0

            async def worker() -> None:
                nonlocal nxt
                while nxt < len(reqs):
                    i = nxt
                    nxt += 1
                    results[i] = await stream_completion(
                        session, base_url, model, reqs[i], timeout_s
                    )

            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(reqs)))))
        else:
            rng = random.Random(seed)
            gate = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with gate:
                    results[i] = await stream_completion(
                        session, base_url, model, reqs[i], timeout_s
                    )

            tasks = []
            for i in range(len(reqs)):
                tasks.append(asyncio.create_task(one(i)))
                await asyncio.sleep(rng.expovariate(request_rate))
            await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    return [r for rs in results if rs is not None for r in rs], wall


def _expand(
    prompts: Sequence[Prompt],
    n: int,
    default_max_tokens: int,
    sampling: dict[str, Any] | None = None,
    chat_extra: dict[str, Any] | None = None,
) -> list[_Req]:
    if not prompts:
        raise LoadError("the workload has no prompts")
    s = dict(sampling or GREEDY)
    extra = dict(chat_extra or {})
    return [
        _Req(p, p.max_tokens or default_max_tokens, s, extra)
        for p in (prompts[i % len(prompts)] for i in range(n))
    ]


async def measure(
    base_url: str,
    model: str,
    prompts: Sequence[Prompt],
    *,
    workload: str,
    concurrency: int,
    num_requests: int,
    max_tokens: int,
    warmup_requests: int = 2,
    timeout_s: float = 120.0,
    slo: dict[str, float] | None = None,
    request_rate: float | None = None,
    seed: int = 0,
    probe: Probe,
    headers: dict[str, str] | None = None,
    passes: int = 1,
    reset_between_passes: bool = False,
    sampling: dict[str, Any] | None = None,
    chat_extra: dict[str, Any] | None = None,
) -> Measurement:
    """Warm up, then one measured window; ``probe`` (the engine's, from ``tuner.engines``)
    wraps the window and says what the engine counted in it: acceptance and queue time (a
    hosted endpoint's probe reads nothing, and only what the client sees is measured).

    A window of several ``passes`` sends the same ``num_requests`` requests that many times,
    one pass after the other (emptying the prefix cache between passes when asked), and is
    timed as their sum: a longer window with the same prompt mix, whatever the speed.
    ``sampling`` (the workload's settings, greedy when None) goes on every request, warm-up
    included; ``chat_extra`` (the workload's chat_template_kwargs) goes on every chat request.
    ``num_requests`` counts workload entries: a conversation sends one request per turn."""
    if warmup_requests:
        warm = _expand(prompts, warmup_requests, max_tokens, sampling, chat_extra)
        await run_requests(
            base_url, model, warm, min(concurrency, len(warm)), timeout_s, headers=headers
        )
    reqs = _expand(prompts, num_requests, max_tokens, sampling, chat_extra)
    results: list[RequestResult] = []
    wall = 0.0
    async with probe.window(base_url) as reading:
        for i in range(max(1, passes)):
            if i and reset_between_passes:
                await probe.reset_prefix_cache(base_url)
            got, seconds = await run_requests(
                base_url,
                model,
                reqs,
                concurrency,
                timeout_s,
                request_rate=request_rate,
                seed=seed + i,
                headers=headers,
            )
            results += got
            wall += seconds
    return summarize(
        results,
        duration_s=wall,
        workload=workload,
        concurrency=concurrency,
        slo=slo,
        spec=reading.spec,
        mean_queue_ms=reading.mean_queue_ms,
        mean_prefill_ms=reading.mean_prefill_ms,
        request_rate_per_s=request_rate,
        endpoint="chat" if prompts[0].chat else "completions",
    )
