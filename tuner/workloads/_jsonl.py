"""SpecTune's own workload format: one JSON object a line with ``prompt`` and optional
``max_tokens``; the built-in sets ship in it. ``Prompt`` is one entry of any workload: a raw
text, or a conversation sent through the model's chat template."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BUILTIN_DIR",
    "Message",
    "Prompt",
    "WorkloadError",
    "builtin_path",
    "as_messages",
    "json_lines",
    "read_jsonl",
    "read_text",
]

BUILTIN_DIR = Path(__file__).resolve().parent  # the built-in *.jsonl sit here

Message = tuple[str, str]  # (role, content): text-only chat, hashable and frozen


class WorkloadError(ValueError):
    """A workload file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Prompt:
    """One entry of a workload.

    Raw (``messages`` empty): ``prompt`` goes to ``/v1/completions`` as written. Chat:
    ``messages`` go to ``/v1/chat/completions`` and the engine applies the model's own chat
    template; each of ``followups`` is a later user turn, sent after the model's own reply to
    the turn before has joined the conversation (as vLLM's multi-turn benchmark does), so a
    conversation is ``1 + len(followups)`` requests, one after the other."""

    prompt: str = ""
    max_tokens: int | None = None
    messages: tuple[Message, ...] = ()
    followups: tuple[str, ...] = ()

    @property
    def chat(self) -> bool:
        return bool(self.messages)

    @property
    def turns(self) -> int:
        return 1 + len(self.followups)

    @property
    def text_bytes(self) -> int:
        """Bytes of every text the conversation sends (bounds its tokens for byte-level
        tokenizers; the template's and the replies' own tokens come on top)."""
        texts = [self.prompt, *(c for _, c in self.messages), *self.followups]
        return sum(len(t.encode()) for t in texts)

    @property
    def first_user_text(self) -> str:
        return next((c for r, c in self.messages if r == "user"), self.prompt)

    def as_chat(self, max_turns: int | None = None) -> Prompt:
        """This entry as a conversation (a raw text becomes one user message), with at most
        ``max_turns`` turns."""
        messages = self.messages or (("user", self.prompt),)
        keep = self.followups if max_turns is None else self.followups[: max(0, max_turns - 1)]
        return Prompt("", self.max_tokens, messages, keep)

    def as_raw(self) -> Prompt:
        """This entry as raw text: a conversation's first user turn (what ``vllm bench
        serve`` sends of a ShareGPT or Spec-Bench file with ``--skip-chat-template``)."""
        return self if not self.chat else Prompt(self.first_user_text, self.max_tokens)


def as_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Messages as the OpenAI chat API takes them."""
    return [{"role": r, "content": c} for r, c in messages]


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


def positive(v: Any, where: str, name: str) -> int | None:
    """An optional positive integer field, or WorkloadError naming it."""
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise WorkloadError(f"{where}: {name}: must be a positive integer")
    return v


def read_jsonl(path: str | Path) -> list[Prompt]:
    """One JSON object a line with ``prompt`` (non-empty string) and optional ``max_tokens``."""
    p = Path(path)
    out: list[Prompt] = []
    for n, obj in json_lines(p):
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise WorkloadError(f"{p}:{n}: prompt: must be a non-empty string")
        out.append(Prompt(prompt, positive(obj.get("max_tokens"), f"{p}:{n}", "max_tokens")))
    if not out:
        raise WorkloadError(f"{p}: the workload has no prompts")
    return out
