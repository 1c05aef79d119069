"""Engine-neutral pieces: the candidate configuration, the launch failure taxonomy, and the
error an engine raises for a method it cannot express."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "ADAPTIVE_STEPS",
    "EngineConfig",
    "EngineLaunchError",
    "ExportUnsupported",
    "FailReason",
    "FAIL_REASONS",
    "adaptive_refused",
]

FailReason = Literal["startup_timeout", "crash", "oom", "invalid_config"]
FAIL_REASONS: tuple[str, ...] = ("startup_timeout", "crash", "oom", "invalid_config")

# SpecTune's own key in a speculative config (no vLLM field): SGLang's adaptive speculation,
# with the candidate steps its controller picks from. Any other engine refuses it.
ADAPTIVE_STEPS = "adaptive_steps"


def adaptive_refused(engine: str) -> str:
    """Why ``engine`` cannot take a config with ``ADAPTIVE_STEPS``, naming the field."""
    return (
        f"methods.*.adaptive: {engine} has no adaptive speculation (SGLang's "
        "--speculative-adaptive picks the depth per batch online); list only false for it"
    )


@dataclass(frozen=True)
class EngineConfig:
    """Everything that needs an engine restart to change. Load (concurrency) is not here."""

    model: str
    served_model_name: str = "target"
    max_model_len: int = 512
    max_num_seqs: int = 8
    memory_fraction: float = 0.1
    speculative_config: dict[str, Any] | None = None
    enforce_eager: bool = False
    cpu_kvcache_gib: int | None = None
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: str | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    chat_template: str | None = None  # a Jinja file replacing the model's own template

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineConfig:
        """Inverse of ``to_dict`` (stored as JSON, so the tuple came back as a list)."""
        return cls(**{**d, "extra_args": tuple(d.get("extra_args") or ())})

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra_args"] = list(self.extra_args)
        if d["chat_template"] is None:
            del d["chat_template"]  # configurations stored before it keep their key
        return d

    def key(self) -> str:
        """Stable identity: two trials with equal keys would launch the very same engine."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def method(self) -> str:
        return "none" if self.speculative_config is None else self.speculative_config["method"]


class EngineLaunchError(RuntimeError):
    """The engine did not become ready. ``reason`` is one of FAIL_REASONS."""

    def __init__(self, reason: FailReason, message: str, log_tail: str = "") -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: FailReason = reason
        self.message = message
        self.log_tail = log_tail


class ExportUnsupported(ValueError):
    """An engine cannot express this configuration (e.g. TensorRT-LLM has no EAGLE-1)."""
