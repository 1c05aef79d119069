"""Workloads: the prompts a measurement sends. Built-in sets ship as JSONL in this folder;
users bring SpecTune JSONL, chat JSONL or a dataset file ``vllm bench serve`` reads
(``_formats``). Each entry is a raw text or a conversation (``Prompt``)."""

from __future__ import annotations

from tuner.workloads._formats import (
    BUILTIN_FORMATS,
    CHAT_FORMATS,
    FORMATS,
    load_prompts,
    read_chat,
    read_custom,
    read_sharegpt,
    read_spec_bench,
)
from tuner.workloads._jsonl import (
    BUILTIN_DIR,
    Message,
    Prompt,
    WorkloadError,
    as_messages,
    builtin_path,
    read_jsonl,
)

__all__ = [
    "BUILTIN_DIR",
    "BUILTIN_FORMATS",
    "CHAT_FORMATS",
    "FORMATS",
    "Message",
    "Prompt",
    "WorkloadError",
    "as_messages",
    "builtin_path",
    "load_prompts",
    "read_chat",
    "read_custom",
    "read_jsonl",
    "read_sharegpt",
    "read_spec_bench",
]
