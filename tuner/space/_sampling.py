"""The sampling settings of a workload: what the user's traffic asks the engine for.

Why they are part of the workload: acceptance under sampling differs from greedy (vLLM's
drafts are argmax, accepted with probability p_target(draft)), so a configuration that pays on
greedy traffic can lose on sampled traffic. Every request of the workload carries them, and
every measurement stores them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from tuner.metrics import GREEDY
from tuner.space._methods import StrictModel

__all__ = ["GREEDY", "SamplingSpec", "sampling_text"]


class SamplingSpec(StrictModel):
    """OpenAI-style sampling parameters (``top_k`` and ``min_p`` as vLLM and SGLang take
    them). Temperature 0 is greedy; the others then change nothing and are refused."""

    temperature: Annotated[float, Field(ge=0, le=2)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    min_p: Annotated[float, Field(ge=0, lt=1)] | None = None
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = Field(
        None,
        description="Sent on every request (as the user's traffic does, if it does); "
        "None: each request samples freely.",
    )

    @model_validator(mode="after")
    def _not_with_greedy(self) -> SamplingSpec:
        if self.temperature == 0:
            extra = [
                k for k in ("top_p", "top_k", "min_p", "seed") if getattr(self, k) is not None
            ]
            if extra:
                verb = "applies" if len(extra) == 1 else "apply"
                raise ValueError(
                    f"{', '.join(extra)} {verb} only when temperature > 0 (temperature 0 is "
                    "greedy); set a temperature or drop them"
                )
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def request(self) -> dict[str, Any]:
        """The fields every request of the workload carries (``{"temperature": 0.0}`` when
        greedy); what a measurement stores as its ``sampling``."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def unseeded(self) -> dict[str, Any]:
        """The distribution's settings without the seed: what offline pricing samples with
        (its own seeds per prompt) and what two measurements must share to compare."""
        return {k: v for k, v in self.request().items() if k != "seed"}

    def text(self) -> str:
        return sampling_text(self.request())


def sampling_text(sampling: dict[str, Any] | None) -> str:
    """``greedy decoding`` or ``temperature 0.8, top-p 0.95``: how a report names the
    settings."""
    s = sampling or GREEDY
    if not s.get("temperature"):
        return "greedy decoding"
    names = {"temperature": "temperature", "top_p": "top-p", "top_k": "top-k", "min_p": "min-p"}
    parts = [f"{names[k]} {s[k]:g}" for k in names if s.get(k) is not None]
    if s.get("seed") is not None:
        parts.append(f"seed {s['seed']}")
    return ", ".join(parts)
