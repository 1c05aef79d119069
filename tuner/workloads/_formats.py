"""Workload files: chat conversations (``chat``), and the formats ``vllm bench serve`` reads
from local files, so a user can bring the dataset they already benchmark with.

Why chat data stays chat: an instruct model is served through ``/v1/chat/completions`` with
its own chat template, and its drafts and heads were trained on templated text, so acceptance
and output length measured on raw text describe traffic nobody sends. ShareGPT and Spec-Bench
are conversations: every user turn is sent, each after the model's own reply to the one
before (the dataset's replies are not sent back: they are another model's). ``raw`` keeps
the first turn as plain text to ``/v1/completions``, as ``--skip-chat-template`` does.

Why only these: vLLM's ``random``, ``burstgpt`` and ``timed_trace`` datasets make up token-id
prompts with the target's tokenizer, and its Hugging Face datasets are not local files; this
layer sends text as written and never downloads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.workloads._jsonl import (
    Message,
    Prompt,
    WorkloadError,
    json_lines,
    positive,
    read_jsonl,
    read_text,
)

__all__ = [
    "BUILTIN_FORMATS",
    "CHAT_FORMATS",
    "FORMATS",
    "load_prompts",
    "read_chat",
    "read_custom",
    "read_sharegpt",
    "read_spec_bench",
]

# ShareGPT's speaker names as its dumps spell them.
_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
_CHAT_ROLES = ("system", "developer", "user", "assistant")


def _nonempty(prompts: list[Prompt], p: Path) -> list[Prompt]:
    if not prompts:
        raise WorkloadError(f"{p}: the workload has no prompts")
    return prompts


def _conversation(
    system: list[Message], users: list[str], first: str, max_tokens: int | None = None
) -> Prompt:
    """A conversation: the system messages and the first user turn, the later user turns as
    followups; ``first`` is what raw mode sends."""
    return Prompt(first, max_tokens, (*system, ("user", users[0])), tuple(users[1:]))


def read_sharegpt(path: str | Path) -> list[Prompt]:
    """ShareGPT JSON: a list of ``{"conversations": [{"from": ..., "value": ...}, ...]}``.
    As vLLM's ShareGPTDataset, entries with fewer than two turns are skipped and raw mode
    sends the first turn's ``value``. As chat, the system turns and every human turn are
    sent, the model answering each. vLLM takes the reply's token count as the output length;
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
        system: list[Message] = []
        users: list[str] = []
        for j, turn in enumerate(turns):
            where = f"{p}: [{i}].conversations[{j}]"
            value = turn.get("value") if isinstance(turn, dict) else None
            if not isinstance(value, str) or not value:
                raise WorkloadError(f"{where}.value: must be a non-empty string")
            who = turn.get("from", "human")
            role = _SHAREGPT_ROLES.get(who) if isinstance(who, str) else None
            if role is None:
                raise WorkloadError(f"{where}.from: unknown speaker {str(who)[:40]!r}")
            if role == "system" and not users:
                system.append(("system", value))
            elif role == "user":
                users.append(value)
        if users:
            out.append(_conversation(system, users, turns[0]["value"]))
    return _nonempty(out, p)


def read_custom(path: str | Path) -> list[Prompt]:
    """vLLM's ``--dataset-name custom`` JSONL: ``prompt`` and optional ``output_tokens``,
    which becomes that prompt's ``max_tokens`` (vLLM's ``--custom-output-len -1``)."""
    p = Path(path)
    out = []
    for n, obj in json_lines(p):
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise WorkloadError(f"{p}:{n}: prompt: must be a non-empty string")
        out.append(Prompt(prompt, positive(obj.get("output_tokens"), f"{p}:{n}", "output_tokens")))
    return _nonempty(out, p)


def _strings(v: Any, where: str) -> list[str]:
    if not isinstance(v, list) or not v:
        raise WorkloadError(f"{where}: must be a non-empty list of strings")
    for i, s in enumerate(v):
        if not isinstance(s, str) or not s:
            raise WorkloadError(f"{where}[{i}]: must be a non-empty string")
    return v


def read_spec_bench(path: str | Path) -> list[Prompt]:
    """Spec-Bench's ``question.jsonl`` (vLLM's ``spec_bench``): every one of ``turns`` as a
    user turn of one conversation (MT-Bench's second turns included); raw mode sends the
    first, as vLLM does."""
    p = Path(path)
    out = []
    for n, obj in json_lines(p):
        turns = _strings(obj.get("turns"), f"{p}:{n}: turns")
        out.append(_conversation([], turns, turns[0]))
    return _nonempty(out, p)


def read_chat(path: str | Path) -> list[Prompt]:
    """Chat JSONL: a line is ``{"messages": [{"role": ..., "content": ...}, ...]}`` as the
    OpenAI chat API takes them, ending with the user's message, with optional ``max_tokens``
    and optional ``followups`` (later user turns, each sent after the model's own reply)."""
    p = Path(path)
    out = []
    for n, obj in json_lines(p):
        where = f"{p}:{n}"
        raw = obj.get("messages")
        if not isinstance(raw, list) or not raw:
            raise WorkloadError(f"{where}: messages: must be a non-empty list of messages")
        messages: list[Message] = []
        for i, m in enumerate(raw):
            role = m.get("role") if isinstance(m, dict) else None
            if role not in _CHAT_ROLES:
                raise WorkloadError(
                    f"{where}: messages[{i}].role: must be one of {', '.join(_CHAT_ROLES)}"
                )
            content = m.get("content")
            if not isinstance(content, str) or not content:
                raise WorkloadError(
                    f"{where}: messages[{i}].content: must be a non-empty string (text chat)"
                )
            messages.append((role, content))
        if messages[-1][0] != "user":
            raise WorkloadError(
                f"{where}: messages: the last message must be the user's (the model answers it)"
            )
        followups = obj.get("followups")
        later = [] if followups is None else _strings(followups, f"{where}: followups")
        limit = positive(obj.get("max_tokens"), where, "max_tokens")
        out.append(Prompt("", limit, tuple(messages), tuple(later)))
    return _nonempty(out, p)


_READERS: dict[str, Callable[[str | Path], list[Prompt]]] = {
    "jsonl": read_jsonl,
    "chat": read_chat,
    "sharegpt": read_sharegpt,
    "custom": read_custom,
    "spec_bench": read_spec_bench,
}
FORMATS = tuple(_READERS)  # the search space's ``workload.format`` choices
# Formats whose entries are conversations: sent as chat unless the workload says raw.
CHAT_FORMATS = ("chat", "sharegpt", "spec_bench")
# The format of each built-in set (``builtin_path``): plain prompts, but for the one set of
# conversations.
BUILTIN_FORMATS = {
    "code_completion": "jsonl",
    "chat": "jsonl",
    "summarization": "jsonl",
    "conversations": "chat",
}


def load_prompts(
    path: str | Path, fmt: str = "jsonl", *, chat: bool | None = None, max_turns: int | None = None
) -> list[Prompt]:
    """The prompts of a workload file in one of ``FORMATS``, as they will be sent: chat
    (``chat=True``; a raw text becomes one user message) or raw text (``False``; a
    conversation's first turn). None: as the format is (chat for ``CHAT_FORMATS``)."""
    reader = _READERS.get(fmt)
    if reader is None:
        raise WorkloadError(f"format: unknown workload format {fmt!r}; choose from {FORMATS}")
    prompts = reader(path)
    if chat is None:
        chat = fmt in CHAT_FORMATS
    if not chat and fmt == "chat":
        raise WorkloadError(f"{path}: a chat file's messages need the chat template (not raw)")
    return [p.as_chat(max_turns) if chat else p.as_raw() for p in prompts]
