"""Async streaming load generator for an OpenAI-compatible ``/v1/completions`` endpoint.

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
from tuner.workloads import Prompt

__all__ = [
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


@dataclass(frozen=True)
class _Req:
    prompt: str
    max_tokens: int
    sampling: dict[str, Any] = field(default_factory=lambda: dict(GREEDY))


async def stream_completion(
    session: aiohttp.ClientSession, url: str, model: str, req: _Req, timeout_s: float
) -> RequestResult:
    body = {
        "model": model,
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        **req.sampling,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
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
                    if choices:
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
                        piece = choices[0].get("text") or ""
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
    """Send ``reqs``; returns results in request order and the wall time.

    Closed loop when ``request_rate`` is None, else Poisson arrivals at that rate.
    ``headers`` (a hosted endpoint's Authorization) go on every request, never in a result.
    """
    url = base_url.rstrip("/") + "/v1/completions"
    results: list[RequestResult | None] = [None] * len(reqs)
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
                    results[i] = await stream_completion(session, url, model, reqs[i], timeout_s)

            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(reqs)))))
        else:
            rng = random.Random(seed)
            gate = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with gate:
                    results[i] = await stream_completion(session, url, model, reqs[i], timeout_s)

            tasks = []
            for i in range(len(reqs)):
                tasks.append(asyncio.create_task(one(i)))
                await asyncio.sleep(rng.expovariate(request_rate))
            await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    return [r for r in results if r is not None], wall


def _expand(
    prompts: Sequence[Prompt],
    n: int,
    default_max_tokens: int,
    sampling: dict[str, Any] | None = None,
) -> list[_Req]:
    if not prompts:
        raise LoadError("the workload has no prompts")
    s = dict(sampling or GREEDY)
    return [
        _Req(p.prompt, p.max_tokens or default_max_tokens, s)
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
) -> Measurement:
    """Warm up, then one measured window; ``probe`` (the engine's, from ``tuner.engines``)
    wraps the window and says what the engine counted in it: acceptance and queue time (a
    hosted endpoint's probe reads nothing, and only what the client sees is measured).

    A window of several ``passes`` sends the same ``num_requests`` requests that many times,
    one pass after the other (emptying the prefix cache between passes when asked), and is
    timed as their sum: a longer window with the same prompt mix, whatever the speed.
    ``sampling`` (the workload's settings, greedy when None) goes on every request, warm-up
    included."""
    if warmup_requests:
        warm = _expand(prompts, warmup_requests, max_tokens, sampling)
        await run_requests(
            base_url, model, warm, min(concurrency, len(warm)), timeout_s, headers=headers
        )
    reqs = _expand(prompts, num_requests, max_tokens, sampling)
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
        request_rate_per_s=request_rate,
    )
