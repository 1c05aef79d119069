"""The engine part of a search space: which engine launches and how, and the hosted
endpoints measured beside it. Every flag, dtype and name that reaches an argv is checked here
against ``tuner.engines``' allow-lists, each error at its field (``engine.extra_args.2``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from tuner.engines import (
    ENGINE_KINDS,
    SERVED_NAME_PATTERN,
    dtype_problem,
    extra_args_problems,
    served_name_problem,
)
from tuner.space._methods import StrictModel

__all__ = ["EngineKind", "EngineSpec", "HostedEndpoint"]

# Engines that launch (tuner.engines' registry) and the replay of a recorded surface.
EngineKind = Literal[(*ENGINE_KINDS, "replay")]  # type: ignore[valid-type]


def _launched_kind(info: ValidationInfo) -> str | None:
    """The engine kind whose flags apply; None for replay (no launch: any engine's)."""
    kind = info.data.get("kind")
    return kind if kind in ENGINE_KINDS else None


def _refused(problems: list[tuple[int, str]], args: list[str]) -> ValidationError:
    """One error per refused argument, each at its index (``engine.extra_args.N``)."""
    return ValidationError.from_exception_data(
        "extra_args",
        [
            InitErrorDetails(
                type=PydanticCustomError("value_error", "{why}", {"why": why}),
                loc=(i,),
                input=args[i],
            )
            for i, why in problems
        ],
    )


class EngineSpec(StrictModel):
    """How to launch the engine; per preset, because what pays differs by hardware."""

    kind: EngineKind = Field(
        "vllm",
        description="sglang launches python -m sglang.launch_server (CUDA only); replay "
        "answers trials from a recorded surface file: for benchmarking the search only, never "
        "a measurement of this job.",
    )
    surface: str | None = Field(None, description="kind replay: the surface file to answer from")
    model: str
    served_model_name: str = Field(
        "target", description=f"the name clients send as model; pattern {SERVED_NAME_PATTERN}"
    )
    max_model_len: Annotated[int, Field(ge=16, le=1_048_576)] = 512
    enforce_eager: bool = Field(
        False,
        description="On CPU it cuts start-up ~75 s -> ~27 s at equal latency; on a GPU it "
        "disables CUDA graphs, so leave it off there.",
    )
    dtype: str | None = None
    cpu_kvcache_gib: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None,
        description="CPU only: exact KV-cache size (VLLM_CPU_KVCACHE_SPACE); overrides "
        "memory_fraction.",
    )
    chat_template: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(
        None,
        description="A Jinja chat template file (relative to this file) served instead of "
        "the model's own, as vLLM's and SGLang's --chat-template; chat workloads go through "
        "it, and the exported command line carries it.",
    )
    device: Literal["cpu", "cuda"] = "cpu"
    startup_timeout_s: Annotated[float, Field(gt=0, le=7200)] = 300.0
    extra_args: Annotated[list[str], Field(max_length=64)] = Field(
        default_factory=list,
        description="more engine flags, each from the engine's allow-list (tuner.engines), "
        "as --flag, --flag=value or --flag value",
    )

    @field_validator("served_model_name")
    @classmethod
    def _served_name(cls, v: str) -> str:
        if (why := served_name_problem(v)) is not None:
            raise ValueError(why)
        return v

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and (why := dtype_problem(_launched_kind(info), v)) is not None:
            raise ValueError(why)
        return v

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if problems := extra_args_problems(_launched_kind(info), v):
            raise _refused(problems, v)
        return v

    @model_validator(mode="after")
    def _surface_for_replay(self) -> EngineSpec:
        if self.kind == "replay" and not self.surface:
            raise ValueError("kind replay needs surface: the recorded surface file")
        if self.kind != "replay" and self.surface is not None:
            raise ValueError("surface applies only to kind: replay")
        return self


class HostedEndpoint(StrictModel):
    """An OpenAI-compatible endpoint you do not launch (a provider, another team's server),
    measured with the same workload and load generator as a reference row beside the trials.
    It is never the winner: there is nothing of it to export."""

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[\w.-]+$")]
    base_url: Annotated[str, Field(pattern=r"^https?://", max_length=2000)] = Field(
        description="server root, as in http://host:8000 (a trailing /v1 is accepted)"
    )
    model: Annotated[str, Field(min_length=1, max_length=500)]
    api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = Field(
        None,
        description="Name of the environment variable holding the key, read when the job "
        "runs; the key itself is never stored.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_literal_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("api_key" in data or "key" in data):
            raise ValueError(
                "api_key: keys are never stored; put it in an environment variable and give "
                "its name in api_key_env"
            )
        return data

    @property
    def root(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")
