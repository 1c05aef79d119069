"""Workloads: the prompts a measurement sends. Built-in sets ship as JSONL in this folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUILTIN_DIR", "Prompt", "WorkloadError", "builtin_path", "read_jsonl"]

BUILTIN_DIR = Path(__file__).resolve().parent


class WorkloadError(ValueError):
    """A workload file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Prompt:
    prompt: str
    max_tokens: int | None = None


def builtin_path(name: str) -> Path:
    p = BUILTIN_DIR / f"{name}.jsonl"
    if not p.exists():
        raise WorkloadError(f"unknown built-in workload {name!r}")
    return p


def read_jsonl(path: str | Path) -> list[Prompt]:
    """One JSON object a line with ``prompt`` (non-empty string) and optional ``max_tokens``."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"cannot read workload {p}: {e}") from None
    out: list[Prompt] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkloadError(f"{p}:{n}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise WorkloadError(f"{p}:{n}: each line must be a JSON object")
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise WorkloadError(f"{p}:{n}: prompt: must be a non-empty string")
        mt = obj.get("max_tokens")
        if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
            raise WorkloadError(f"{p}:{n}: max_tokens: must be a positive integer")
        out.append(Prompt(prompt, mt))
    if not out:
        raise WorkloadError(f"{p}: the workload has no prompts")
    return out
