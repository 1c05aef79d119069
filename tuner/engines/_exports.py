"""The one list of export formats (the CLI, the API schema and the web UI all read it) and
the renderer of each from a winner's engine configuration."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from tuner.engines._base import ADAPTIVE_STEPS, EngineConfig, ExportUnsupported, adaptive_refused
from tuner.engines._sglang import sglang_cli
from tuner.engines._trtllm import trtllm_yaml
from tuner.engines._vllm import export_cli

__all__ = ["EXPORT_FORMATS", "EXPORT_FORMAT_NAMES", "ExportFormat", "render_export"]


@dataclass(frozen=True)
class ExportFormat:
    name: str
    label: str
    engine: str
    description: str


EXPORT_FORMATS: tuple[ExportFormat, ...] = (
    ExportFormat(
        "vllm-json",
        "vLLM --speculative-config JSON",
        "vllm",
        "Only the object that goes after --speculative-config; null when the baseline wins.",
    ),
    ExportFormat(
        "vllm-cli",
        "vLLM command line",
        "vllm",
        "One `vllm serve` line to paste: the environment that changes the engine's speed "
        "(the OpenMP preload on CPU included) and every engine flag the winner was measured "
        "with.",
    ),
    ExportFormat(
        "vllm-schedule-json",
        "vLLM per-batch-size schedule JSON",
        "vllm",
        "The --speculative-config object with num_speculative_tokens_per_batch_size: the best "
        "depth at each measured concurrency.",
    ),
    ExportFormat(
        "sglang",
        "SGLang launch_server flags",
        "sglang",
        "One `python -m sglang.launch_server` line (GPU) with the same speculation.",
    ),
    ExportFormat(
        "trtllm-yaml",
        "TensorRT-LLM YAML",
        "trtllm",
        "The YAML `trtllm-serve MODEL --config FILE` takes.",
    ),
)
EXPORT_FORMAT_NAMES: tuple[str, ...] = tuple(f.name for f in EXPORT_FORMATS)

NO_SCHEDULE = (
    "no depth schedule: the same depth is best at every concurrency measured "
    "(or speculation never pays); use vllm-json"
)


def _vllm_spec(cfg: EngineConfig) -> dict | None:
    if ADAPTIVE_STEPS in (cfg.speculative_config or {}):
        raise ExportUnsupported(adaptive_refused("vLLM"))
    return cfg.speculative_config


def _vllm_json(cfg: EngineConfig) -> str:
    # Only the object that goes after --speculative-config; null when the baseline wins.
    return json.dumps(_vllm_spec(cfg), separators=(", ", ": "))


def _vllm_schedule_json(cfg: EngineConfig, schedule: list[list[int]] | None) -> str:
    if schedule is None or _vllm_spec(cfg) is None:
        raise ExportUnsupported(NO_SCHEDULE)
    spec = dict(cfg.speculative_config or {})
    spec["num_speculative_tokens"] = max(k for _, _, k in schedule)
    spec["num_speculative_tokens_per_batch_size"] = schedule
    return json.dumps(spec, separators=(", ", ": "))


_RENDERERS: dict[str, Callable[[EngineConfig], str]] = {
    "vllm-json": _vllm_json,
    "vllm-cli": export_cli,
    "sglang": sglang_cli,
    "trtllm-yaml": trtllm_yaml,
}


def render_export(name: str, cfg: EngineConfig, schedule: list[list[int]] | None = None) -> str:
    """The text of export format ``name`` for ``cfg``. ``schedule`` (rows ``[from, to,
    depth]``) is read by ``vllm-schedule-json`` only. ExportUnsupported when the engine cannot
    express the configuration; ValueError for an unknown format."""
    if name == "vllm-schedule-json":
        return _vllm_schedule_json(cfg, schedule)
    render = _RENDERERS.get(name)
    if render is None:
        raise ValueError(f"format: unknown {name!r}; choose from {', '.join(EXPORT_FORMAT_NAMES)}")
    return render(cfg)
