"""A hosted OpenAI-compatible endpoint in the place of a launched server: nothing to start,
stop or reset, no engine counters; the key travels only in the request headers."""

from __future__ import annotations

from typing import ClassVar, Self

from tuner.engines._probe import EngineProbe, HostedProbe

__all__ = ["HostedServer"]


class HostedServer:
    """Same surface as ``ServerProcess`` for the parts a measurement uses."""

    kind: ClassVar[str] = "hosted"
    probe: ClassVar[EngineProbe] = HostedProbe()
    proc = None
    startup_s: float | None = None
    peak_rss_mb: float | None = None

    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        self.base_url = base_url
        self.headers = headers

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def start(self) -> None:
        return None

    def stop(self, grace_s: float = 20.0) -> None:
        return None

    def alive(self) -> bool:
        return True

    def log_tail(self, max_bytes: int = 6000) -> str:
        return ""

    def kv_cache_tokens(self) -> int | None:
        return None
