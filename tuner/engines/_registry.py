"""The engines SpecTune launches (the search space's ``engine.kind`` choices come from here)
and how each engine spells every method."""

from __future__ import annotations

from tuner.engines._process import ServerProcess
from tuner.engines._sglang import SGLANG_ALGORITHMS, SGLangServer
from tuner.engines._trtllm import TRTLLM_DECODING
from tuner.engines._vllm import VLLM_METHODS, VLLMServer

__all__ = ["ENGINES", "ENGINE_KINDS", "METHOD_SPELLINGS", "server_class"]

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
