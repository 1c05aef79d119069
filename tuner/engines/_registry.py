"""The engines SpecTune launches (the search space's ``engine.kind`` choices come from here)
and how each engine spells every method."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.engines._args import flag_problems
from tuner.engines._process import ServerProcess
from tuner.engines._sglang import SGLANG_ALGORITHMS, SGLangServer
from tuner.engines._trtllm import TRTLLM_DECODING
from tuner.engines._vllm import VLLM_METHODS, VLLMServer

__all__ = [
    "ENGINES",
    "ENGINE_KINDS",
    "METHOD_SPELLINGS",
    "dtype_problem",
    "extra_args_problems",
    "server_class",
]

ENGINES: dict[str, type[ServerProcess]] = {"vllm": VLLMServer, "sglang": SGLangServer}
ENGINE_KINDS: tuple[str, ...] = tuple(ENGINES)

# engine -> {SpecTune method -> that engine's name for it}; a missing method: not expressible.
METHOD_SPELLINGS: dict[str, dict[str, str]] = {
    "vllm": VLLM_METHODS,
    "sglang": SGLANG_ALGORITHMS,
    "trtllm": TRTLLM_DECODING,
}


def server_class(kind: str) -> type[ServerProcess]:
    """The server class of an engine kind; ValueError naming the choices otherwise."""
    try:
        return ENGINES[kind]
    except KeyError:
        raise ValueError(
            f"engine.kind: unknown {kind!r}; choose from {', '.join(ENGINE_KINDS)}"
        ) from None


def _classes(kind: str | None) -> list[type[ServerProcess]]:
    return list(ENGINES.values()) if kind is None else [server_class(kind)]


def extra_args_problems(kind: str | None, args: Sequence[str]) -> list[tuple[int, str]]:
    """(index, why) for each of a job's extra arguments the engine's allow-list refuses.

    ``kind`` None (nothing launches, as a replay of a recorded surface): arguments that some
    one engine accepts whole pass; otherwise the first engine's refusals are answered."""
    results = [flag_problems(cls.extra_flags, args) for cls in _classes(kind)]
    return next((r for r in results if not r), results[0])


def dtype_problem(kind: str | None, dtype: str) -> str | None:
    """Why the engine (any engine when ``kind`` is None) cannot take ``--dtype dtype``."""
    choices = sorted(set().union(*(cls.dtypes for cls in _classes(kind))))
    if dtype in choices:
        return None
    return f"dtype {dtype[:40]!r} is not one of {', '.join(choices)}"
