"""Workload files in the formats ``vllm bench serve`` reads from local files, so a user can
bring the dataset they already benchmark with.

Why only these: vLLM's ``random``, ``burstgpt`` and ``timed_trace`` datasets make up token-id
prompts with the target's tokenizer, and its Hugging Face datasets are not local files; this
layer sends text as written and never downloads. Like ``--skip-chat-template``, prompts go to
``/v1/completions`` unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.workloads._jsonl import Prompt, WorkloadError, json_lines, read_jsonl, read_text

__all__ = ["FORMATS", "load_prompts", "read_custom", "read_sharegpt", "read_spec_bench"]


def _nonempty(prompts: list[Prompt], p: Path) -> list[Prompt]:
    if not prompts:
        raise WorkloadError(f"{p}: the workload has no prompts")
    return prompts


def read_sharegpt(path: str | Path) -> list[Prompt]:
    """ShareGPT JSON: a list of ``{"conversations": [{"from": ..., "value": ...}, ...]}``.
    As vLLM's ShareGPTDataset: entries with fewer than two turns are skipped and the first
    turn's ``value`` is the prompt. vLLM takes the reply's token count as the output length;
    without the tokenizer here, the workload's ``max_tokens`` applies instead."""
    p = Path(path)
    try:
        data = json.loads(read_text(p))
    except json.JSONDecodeError as e:
        raise WorkloadError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, list):
        raise WorkloadError(f"{p}: a ShareGPT file is a JSON list of conversations")
    out = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise WorkloadError(f"{p}: [{i}]: each entry must be a JSON object")
        turns = entry.get("conversations")
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first = turns[0]
        value = first.get("value") if isinstance(first, dict) else None
        if not isinstance(value, str) or not value:
            raise WorkloadError(f"{p}: [{i}].conversations[0].value: must be a non-empty string")
        out.append(Prompt(value))
    return _nonempty(out, p)


def _output_tokens(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise WorkloadError(f"{where}: output_tokens: must be a positive integer")
    return v


def read_custom(path: str | Path) -> list[Prompt]:
    """vLLM's ``--dataset-name custom`` JSONL: ``prompt`` and optional ``output_tokens``,
    which becomes that prompt's ``max_tokens`` (vLLM's ``--custom-output-len -1``)."""
    p = Path(path)
    out = []
    for n, obj in json_lines(p):
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise WorkloadError(f"{p}:{n}: prompt: must be a non-empty string")
        out.append(Prompt(prompt, _output_tokens(obj.get("output_tokens"), f"{p}:{n}")))
    return _nonempty(out, p)


def read_spec_bench(path: str | Path) -> list[Prompt]:
    """Spec-Bench's ``question.jsonl`` (vLLM's ``spec_bench``): the first of ``turns``."""
    p = Path(path)
    out = []
    for n, obj in json_lines(p):
        turns = obj.get("turns")
        if not isinstance(turns, list) or not turns:
            raise WorkloadError(f"{p}:{n}: turns: must be a non-empty list of strings")
        if not isinstance(turns[0], str) or not turns[0]:
            raise WorkloadError(f"{p}:{n}: turns[0]: must be a non-empty string")
        out.append(Prompt(turns[0]))
    return _nonempty(out, p)


_READERS: dict[str, Callable[[str | Path], list[Prompt]]] = {
    "jsonl": read_jsonl,
    "sharegpt": read_sharegpt,
    "custom": read_custom,
    "spec_bench": read_spec_bench,
}
FORMATS = tuple(_READERS)  # the search space's ``workload.format`` choices


def load_prompts(path: str | Path, fmt: str = "jsonl") -> list[Prompt]:
    """The prompts of a workload file in one of ``FORMATS``."""
    reader = _READERS.get(fmt)
    if reader is None:
        raise WorkloadError(f"format: unknown workload format {fmt!r}; choose from {FORMATS}")
    return reader(path)
