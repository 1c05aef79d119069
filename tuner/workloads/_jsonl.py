"""SpecTune's own workload format: one JSON object a line with ``prompt`` and optional
``max_tokens``; the built-in sets ship in it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BUILTIN_DIR",
    "Prompt",
    "WorkloadError",
    "builtin_path",
    "json_lines",
    "read_jsonl",
    "read_text",
]

BUILTIN_DIR = Path(__file__).resolve().parent  # the built-in *.jsonl sit here


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


def read_text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise WorkloadError(f"cannot read workload {p}: {why}") from None
    except UnicodeDecodeError as e:  # its text would quote the file's bytes
        raise WorkloadError(f"cannot read workload {p}: not UTF-8 (at byte {e.start})") from None


def json_lines(p: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-empty line; a line that is no JSON object is an
    error naming the file and line."""
    out = []
    for n, line in enumerate(read_text(p).splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkloadError(f"{p}:{n}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise WorkloadError(f"{p}:{n}: each line must be a JSON object")
        out.append((n, obj))
    return out


def read_jsonl(path: str | Path) -> list[Prompt]:
    """One JSON object a line with ``prompt`` (non-empty string) and optional ``max_tokens``."""
    p = Path(path)
    out: list[Prompt] = []
    for n, obj in json_lines(p):
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
