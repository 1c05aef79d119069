"""What SGLang's server tells us: acceptance gauges (``--enable-metrics``), the running
average in ``/server_info`` when metrics are off, ``/flush_cache`` and greedy token ids from
its native ``/generate``.

SGLang exposes running averages, not counters, so a window's acceptance is the mean of the
gauges sampled every ``GAUGE_EVERY_S`` while it runs. No queue-time histogram is read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar

from prometheus_client.parser import text_string_to_metric_families

from tuner.engines._probe import EngineProbe, fetch_metrics_text, get_text
from tuner.metrics import LoadError, SpecStats, WindowReading

__all__ = [
    "GAUGE_EVERY_S",
    "SGLangProbe",
    "parse_sglang_spec_gauges",
    "server_info_accept_length",
    "sglang_spec_stats",
]

GAUGE_EVERY_S = 0.5  # acceptance gauges: sampling period during a window

_GAUGES = {"sglang:spec_accept_length": "length", "sglang:spec_accept_rate": "rate"}


def parse_sglang_spec_gauges(text: str) -> tuple[float, float] | None:
    """(mean acceptance length, acceptance rate) from SGLang's ``spec_accept_length`` and
    ``spec_accept_rate`` gauges (averaged over label sets); None when absent or zero (no
    speculative step has run yet)."""
    got: dict[str, list[float]] = {"length": [], "rate": []}
    for fam in text_string_to_metric_families(text):
        key = _GAUGES.get(fam.name)
        if key is None:
            continue
        got[key] += [s.value for s in fam.samples]
    if not got["length"] or max(got["length"]) <= 0:
        return None
    rate = sum(got["rate"]) / len(got["rate"]) if got["rate"] else float("nan")
    return sum(got["length"]) / len(got["length"]), rate


def sglang_spec_stats(samples: list[tuple[float, float]]) -> SpecStats | None:
    """Acceptance over a window from gauge samples taken while it ran. SGLang exposes running
    averages, not counters, so the window's value is the mean of its samples; token counts
    and per-position acceptance are not exposed (reported as 0 / empty)."""
    if not samples:
        return None
    length = sum(s[0] for s in samples) / len(samples)
    rates = [s[1] for s in samples if s[1] == s[1]]  # drop NaN (rate gauge missing)
    return SpecStats(
        num_drafts=0,
        num_draft_tokens=0,
        num_accepted_tokens=0,
        acceptance_rate=sum(rates) / len(rates) if rates else None,
        mean_acceptance_length=length,
        per_position_acceptance=[],
    )


async def server_info_accept_length(base_url: str) -> float | None:
    """``internal_states[0].avg_spec_accept_length`` from SGLang's ``/server_info``."""
    try:
        status, body = await get_text(base_url, "/server_info")
        info = json.loads(body) if status == 200 else {}
    except (LoadError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states") or [{}]
    v = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    return float(v) if isinstance(v, int | float) and v > 0 else None


async def _scrape(base_url: str) -> str:
    # SGLang without --enable-metrics has no /metrics: /server_info then answers.
    try:
        return await fetch_metrics_text(base_url)
    except LoadError:
        return ""


class SGLangProbe(EngineProbe):
    """``sglang.launch_server``."""

    kind: ClassVar[str] = "sglang"
    reset_path: ClassVar[str | None] = "/flush_cache"
    greedy_path: ClassVar[str | None] = "/generate"

    @asynccontextmanager
    async def window(self, base_url: str) -> AsyncIterator[WindowReading]:
        """Gauges sampled while the window runs and once after it; ``/server_info``'s running
        average when no gauge was readable."""
        reading = WindowReading()
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

        sampler = asyncio.create_task(sample_gauges())
        try:
            yield reading
        finally:
            stop.set()
            await sampler
        g = parse_sglang_spec_gauges(await _scrape(base_url))
        if g is not None:
            samples.append(g)
        elif not samples:  # metrics off: SGLang's /server_info has the running average
            length = await server_info_accept_length(base_url)
            if length:
                samples.append((length, float("nan")))
        reading.spec = sglang_spec_stats(samples)

    def _ids_body(
        self,
        model: str,
        prompt: str | list[int],
        max_tokens: int,
        sampling: dict[str, Any],
        n: int,
        seed: int,
    ) -> dict[str, Any]:
        """SGLang's native batch: the prompt n times, sample i seeded with seed + i. Its
        chat API answers no token ids, so chat workloads go without the ids checks there
        (``chat_path`` stays None)."""
        sp = {"max_new_tokens": max_tokens, "ignore_eos": True, **sampling}
        if "seed" in sp:
            sp["sampling_seed"] = sp.pop("seed")
        key = "text" if isinstance(prompt, str) else "input_ids"
        if n == 1 and not sampling.get("temperature"):
            return {key: prompt, "sampling_params": sp}
        return {
            key: [prompt] * n,
            "sampling_params": [{**sp, "sampling_seed": seed + i} for i in range(n)],
        }

    def _ids_of(self, answer: Any) -> list[Any]:
        return [a["output_ids"] for a in (answer if isinstance(answer, list) else [answer])]
