"""The workload part of a search space: which prompts, sent how (raw text or chat through
the model's template), how many, how long, sampled how, arriving how."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from tuner.space._methods import StrictModel
from tuner.space._sampling import SamplingSpec
from tuner.workloads import BUILTIN_FORMATS, CHAT_FORMATS

__all__ = ["WorkloadSpec"]

_DEFAULT_BUILTIN = "code_completion"


class WorkloadSpec(StrictModel):
    """Which prompts, how many, how long, sampled how; ``builtin`` names a set shipped with
    SpecTune, ``path`` a file of the user's (an explicit ``path`` replaces the default set)."""

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[\w.-]+$")] = Field(
        _DEFAULT_BUILTIN,
        description="How the report, the API and --workload call it (default: the builtin's "
        "name or the file's stem). Two workloads may send the same prompts under different "
        "names, e.g. greedy and sampled; each is reported apart, never averaged.",
    )
    builtin: Literal["code_completion", "chat", "summarization", "conversations"] | None = Field(
        _DEFAULT_BUILTIN,
        description="A set shipped with SpecTune: code_completion, chat and summarization are "
        "plain prompts (raw by default); conversations is chat (system, few-shot turns, some "
        "with a follow-up question), sent through the model's chat template.",
    )
    path: str | None = None
    format: Literal["jsonl", "chat", "sharegpt", "custom", "spec_bench"] = Field(
        "jsonl",
        description="How path is read: SpecTune JSONL (prompt), chat JSONL (OpenAI messages), "
        "or a file `vllm bench serve` reads (sharegpt JSON, custom JSONL, spec_bench JSONL); "
        "tuner.workloads.FORMATS.",
    )
    raw: bool | None = Field(
        None,
        description="true: plain text to /v1/completions (a conversation's first turn, as "
        "vllm bench serve --skip-chat-template); false: /v1/chat/completions through the "
        "model's chat template (a plain prompt becomes one user message). Default: chat for "
        "chat, sharegpt and spec_bench, raw for jsonl, custom and the built-in sets.",
    )
    max_turns: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        None,
        description="Chat: at most this many user turns of each conversation (default: all). "
        "Each later turn carries the earlier ones with the model's own replies, so a long "
        "conversation can outgrow engine.max_model_len.",
    )
    chat_template_kwargs: dict[str, bool | int | float | str] | None = Field(
        None,
        description="Chat: sent with every request as the chat API's chat_template_kwargs "
        "(e.g. enable_thinking: false), as the user's own clients send them.",
    )
    sampling: SamplingSpec = Field(
        default_factory=SamplingSpec,
        description="The sampling settings of the user's traffic, sent on every request of "
        "this workload and stored with every measurement (default: greedy).",
    )
    num_prompts: Annotated[int, Field(ge=1, le=100_000)] = 32
    max_tokens: Annotated[int, Field(ge=1, le=65_536)] = 96
    warmup_requests: Annotated[int, Field(ge=0, le=1000)] = 2
    request_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 120.0
    arrival: Literal["closed", "poisson"] = Field(
        "closed", description="closed: fixed concurrency; poisson: open loop at request_rate"
    )
    request_rate: Annotated[float, Field(gt=0, le=100_000)] | None = Field(
        None, description="Requests per second for poisson arrivals."
    )

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """A ``path`` given without ``builtin`` replaces the default set (no ``builtin:
        null`` needed); a workload without ``name`` is called after its set or file."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("path") is not None and "builtin" not in data:
            data["builtin"] = None
        if data.get("name") is None:
            builtin = data.get("builtin", _DEFAULT_BUILTIN)
            path = data.get("path")
            if builtin is not None:
                data["name"] = builtin
            elif isinstance(path, str) and Path(path).stem:
                data["name"] = re.sub(r"[^\w.-]", "_", Path(path).stem)[:100]
            else:
                data.pop("name", None)
        return data

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadSpec:
        if self.path is not None and self.builtin is not None:
            raise ValueError("give either builtin or path, not both")
        if self.path is None and self.builtin is None:
            raise ValueError("give builtin or path")
        if self.path is None and self.format != "jsonl":
            raise ValueError(f"format {self.format} applies only to a path, not a builtin")
        if self.raw is True and self.read_as == "chat":
            raise ValueError("raw: a chat file's messages need the chat template; drop raw")
        if self.chat_template_kwargs is not None and not self.chat:
            raise ValueError("chat_template_kwargs applies only to chat requests (raw: false)")
        if self.max_turns is not None and not self.chat:
            raise ValueError("max_turns applies only to chat requests (raw: false)")
        if self.arrival == "poisson" and self.request_rate is None:
            raise ValueError("arrival poisson needs request_rate (requests per second)")
        if self.arrival == "closed" and self.request_rate is not None:
            raise ValueError("request_rate applies only to arrival: poisson")
        return self

    @property
    def chat(self) -> bool:
        """Whether requests go through the chat template (``/v1/chat/completions``)."""
        return not self.raw if self.raw is not None else self.read_as in CHAT_FORMATS

    @property
    def read_as(self) -> str:
        """The format the prompts are read in: the built-in set's own, or ``format``."""
        return BUILTIN_FORMATS[self.builtin] if self.builtin else self.format

    @property
    def endpoint(self) -> Literal["chat", "completions"]:
        return "chat" if self.chat else "completions"
