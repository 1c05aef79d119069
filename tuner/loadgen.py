"""Async streaming load generator for an OpenAI-compatible ``/v1/completions`` endpoint.

Closed loop: ``concurrency`` workers each keep one request in flight. Open loop: requests
arrive as a Poisson process at ``request_rate`` per second (seeded), whether or not earlier
ones have finished, capped at ``concurrency`` in flight. Every request is greedy
(temperature 0) with ``ignore_eos`` so each produces exactly ``max_tokens``: measurements of
different configurations then cover the same work. Token counts come from the server's
``usage`` (a streamed chunk can carry several tokens under speculation).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from tuner.metrics import (
    Measurement,
    RequestResult,
    parse_queue_time,
    parse_sglang_spec_gauges,
    parse_spec_counters,
    queue_delta,
    sglang_spec_stats,
    spec_delta,
    summarize,
)
from tuner.workloads import Prompt

__all__ = [
    "LoadError",
    "fetch_metrics_text",
    "greedy_token_ids",
    "measure",
    "reset_prefix_cache",
    "run_requests",
    "stream_completion",
]


GAUGE_EVERY_S = 0.5  # SGLang acceptance gauges: sampling period during a window


class LoadError(RuntimeError):
    """The measurement could not be made (server unreachable, metrics unreadable)."""


@dataclass(frozen=True)
class _Req:
    prompt: str
    max_tokens: int


async def stream_completion(
    session: aiohttp.ClientSession, url: str, model: str, req: _Req, timeout_s: float
) -> RequestResult:
    body = {
        "model": model,
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        "temperature": 0.0,
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
                    if choices and choices[0].get("text"):
                        now = time.perf_counter()
                        if ttft is None:
                            ttft = now - t0
                        else:
                            itl.append(now - last)
                        last = now
                        text.append(choices[0]["text"])
    except TimeoutError:
        return RequestResult(ok=False, error=f"timeout after {timeout_s:g} s")
    except (aiohttp.ClientError, json.JSONDecodeError) as e:
        return RequestResult(ok=False, error=f"{type(e).__name__}: {e}"[:200])
    # End-to-end ends at the last token, as vLLM's own benchmark counts it: the usage chunk
    # and [DONE] that follow carry no token.
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


async def reset_prefix_cache(base_url: str, engine: str = "vllm") -> bool:
    """Empty the engine's prefix cache so one level's prompts do not warm the next's.
    vLLM serves this only in dev mode (SGLang: ``/flush_cache``); False when the engine does
    not offer it."""
    path = "/flush_cache" if engine == "sglang" else "/reset_prefix_cache"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(
                base_url.rstrip("/") + path,
                timeout=aiohttp.ClientTimeout(total=30),
            ) as r:
                return r.status == 200
    except aiohttp.ClientError:
        return False


async def greedy_token_ids(
    base_url: str,
    model: str,
    prompts: Sequence[str],
    max_tokens: int,
    timeout_s: float = 120,
    engine: str = "vllm",
) -> list[list[int] | None]:
    """Greedy continuations as token ids (None for a request that failed). vLLM returns them
    from ``/v1/completions`` (``return_token_ids``); SGLang from its native ``/generate``."""
    sglang = engine == "sglang"
    url = base_url.rstrip("/") + ("/generate" if sglang else "/v1/completions")
    out: list[list[int] | None] = []
    async with aiohttp.ClientSession() as s:
        for p in prompts:
            body: dict[str, Any] = {
                "model": model, "prompt": p, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True, "return_token_ids": True}  # fmt: skip
            if sglang:
                sp = {"max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}
                body = {"text": p, "sampling_params": sp}
            try:
                async with s.post(
                    url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)
                ) as r:
                    if r.status != 200:
                        out.append(None)
                        continue
                    js = await r.json()
                    ids = js.get("output_ids") if sglang else js["choices"][0].get("token_ids")
                    out.append([int(t) for t in ids] if ids is not None else None)
            except (aiohttp.ClientError, TimeoutError, KeyError, ValueError):
                out.append(None)
    return out


async def _get_text(base_url: str, path: str) -> tuple[int, str]:
    """(HTTP status, body) of one GET to the engine; LoadError when unreachable."""
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(
                base_url.rstrip("/") + path, timeout=aiohttp.ClientTimeout(total=10)
            ) as r:
                return r.status, await r.text()
    except (aiohttp.ClientError, TimeoutError) as e:
        raise LoadError(f"{path} unreachable: {e}") from e


async def sglang_server_info_accept_length(base_url: str) -> float | None:
    """``internal_states[0].avg_spec_accept_length`` from SGLang's ``/server_info``."""
    try:
        status, body = await _get_text(base_url, "/server_info")
        info = json.loads(body) if status == 200 else {}
    except (LoadError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states") or [{}]
    v = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    return float(v) if isinstance(v, int | float) and v > 0 else None


async def fetch_metrics_text(base_url: str) -> str:
    status, body = await _get_text(base_url, "/metrics")
    if status != 200:
        raise LoadError(f"/metrics answered HTTP {status}")
    return body


def _expand(prompts: Sequence[Prompt], n: int, default_max_tokens: int) -> list[_Req]:
    if not prompts:
        raise LoadError("the workload has no prompts")
    return [
        _Req(p.prompt, p.max_tokens or default_max_tokens)
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
    engine: str = "vllm",
    headers: dict[str, str] | None = None,
) -> Measurement:
    """Warm up, then one measured window, with acceptance and queue-time deltas.

    vLLM exposes counters, read before and after the window. SGLang exposes running-average
    gauges, so they are sampled every ``GAUGE_EVERY_S`` while the window runs. A hosted
    endpoint exposes neither: only what the client sees is measured."""
    if warmup_requests:
        warm = _expand(prompts, warmup_requests, max_tokens)
        await run_requests(
            base_url, model, warm, min(concurrency, len(warm)), timeout_s, headers=headers
        )
    reqs = _expand(prompts, num_requests, max_tokens)
    if engine == "hosted":
        results, wall = await run_requests(
            base_url, model, reqs, concurrency, timeout_s, request_rate=request_rate, seed=seed,
            headers=headers,
        )  # fmt: skip
        return summarize(results, duration_s=wall, workload=workload, concurrency=concurrency,
                         slo=slo, spec=None, mean_queue_ms=None,
                         request_rate_per_s=request_rate)  # fmt: skip
    async def scrape() -> str:
        # SGLang without --enable-metrics has no /metrics: /server_info then answers.
        try:
            return await fetch_metrics_text(base_url)
        except LoadError:
            if engine != "sglang":
                raise
            return ""

    text = await scrape()
    before, q0 = parse_spec_counters(text), parse_queue_time(text)
    samples: list[tuple[float, float]] = []
    stop = asyncio.Event()

    async def sample_gauges() -> None:
        while not stop.is_set():
            try:
                g = parse_sglang_spec_gauges(await fetch_metrics_text(base_url))
            except LoadError:
                g = None
            if g is not None:
                samples.append(g)
            try:
                await asyncio.wait_for(stop.wait(), GAUGE_EVERY_S)
            except TimeoutError:
                pass

    sampler = asyncio.create_task(sample_gauges()) if engine == "sglang" else None
    try:
        results, wall = await run_requests(
            base_url, model, reqs, concurrency, timeout_s, request_rate=request_rate, seed=seed
        )
    finally:
        stop.set()
        if sampler is not None:
            await sampler
    text = await scrape()
    after, q1 = parse_spec_counters(text), parse_queue_time(text)
    if engine == "sglang":
        g = parse_sglang_spec_gauges(text)
        if g is not None:
            samples.append(g)
        elif not samples:  # metrics off: SGLang's /server_info has the running average
            length = await sglang_server_info_accept_length(base_url)
            if length:
                samples.append((length, float("nan")))
    spec = sglang_spec_stats(samples) if engine == "sglang" else spec_delta(before, after)
    return summarize(
        results,
        duration_s=wall,
        workload=workload,
        concurrency=concurrency,
        slo=slo,
        spec=spec,
        mean_queue_ms=queue_delta(q0, q1),
        request_rate_per_s=request_rate,
    )
