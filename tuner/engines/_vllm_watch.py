"""What a deployed vLLM server says about itself, for ``spectune watch``: its spec-decode
counters, its running and waiting requests, how many draft positions it counts (its depth
k), the memory fraction in its cache info, and what ``/v1/models`` serves.

Why here: only ``tuner.engines`` knows vLLM's metric names and endpoints; the watch (and
its verdict) reads the typed ``ServerSnapshot`` instead of Prometheus text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tuner.engines._probe import fetch_metrics_text, get_text
from tuner.engines._vllm_probe import PER_POSITION, parse_spec_counters
from tuner.metrics import LoadError, SpecCounters

__all__ = [
    "ServedModel",
    "ServerSnapshot",
    "parse_server_snapshot",
    "read_server",
    "served_models",
]

_RUNNING = "vllm:num_requests_running"
_WAITING = "vllm:num_requests_waiting"
_CACHE_INFO = "vllm:cache_config_info"
_STARTED = "process_start_time_seconds"


@dataclass(frozen=True)
class ServerSnapshot:
    """One scrape of a vLLM server's ``/metrics``, typed.

    ``positions``: the number of per-position acceptance counters, which vLLM creates once
    per drafted position at start, so it is the server's ``num_speculative_tokens`` (0:
    speculation off). Gauges are None when the server does not expose them."""

    spec: SpecCounters
    running: float | None
    waiting: float | None
    positions: int
    model_names: tuple[str, ...]
    memory_fraction: float | None
    started_at: float | None = None  # the server process's start (Unix s), when exposed


@dataclass(frozen=True)
class ServedModel:
    """One entry of ``/v1/models``: the served name, the checkpoint it was loaded from and
    the context length (None where the server does not say)."""

    name: str
    root: str | None
    max_model_len: int | None


def parse_server_snapshot(text: str) -> ServerSnapshot:
    """The watch's view of one ``/metrics`` text (gauges summed over engines)."""
    running = waiting = memory = started = None
    positions: set[str] = set()
    names: set[str] = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "model_name" in s.labels:
                names.add(s.labels["model_name"])
            if s.name == _RUNNING:
                running = (running or 0.0) + s.value
            elif s.name == _WAITING:
                waiting = (waiting or 0.0) + s.value
            elif s.name == PER_POSITION + "_total":
                positions.add(s.labels.get("position", "0"))
            elif s.name == _STARTED:
                started = s.value
            elif s.name == _CACHE_INFO and "gpu_memory_utilization" in s.labels:
                try:
                    memory = float(s.labels["gpu_memory_utilization"])
                except ValueError:
                    memory = None
    return ServerSnapshot(
        spec=parse_spec_counters(text),
        running=running,
        waiting=waiting,
        positions=len(positions),
        model_names=tuple(sorted(names)),
        memory_fraction=memory,
        started_at=started,
    )


async def read_server(base_url: str) -> ServerSnapshot:
    """One scrape; LoadError when ``/metrics`` cannot be read."""
    return parse_server_snapshot(await fetch_metrics_text(base_url))


async def served_models(base_url: str) -> list[ServedModel]:
    """What ``/v1/models`` lists; LoadError when it cannot be read or is not the OpenAI
    shape."""
    status, body = await get_text(base_url, "/v1/models")
    if status != 200:
        raise LoadError(f"/v1/models answered HTTP {status}")
    try:
        data = json.loads(body)["data"]
        return [
            ServedModel(
                str(m["id"]),
                str(m["root"]) if m.get("root") else None,
                int(m["max_model_len"]) if m.get("max_model_len") else None,
            )
            for m in data
        ]
    except (ValueError, KeyError, TypeError) as e:
        raise LoadError(f"/v1/models: not an OpenAI model list ({e})") from None
