"""Workloads: the prompts a measurement sends. Built-in sets ship as JSONL in this folder;
users bring SpecTune JSONL or a dataset file ``vllm bench serve`` reads (``_formats``)."""

from __future__ import annotations

from tuner.workloads._formats import (
    FORMATS,
    load_prompts,
    read_custom,
    read_sharegpt,
    read_spec_bench,
)
from tuner.workloads._jsonl import BUILTIN_DIR, Prompt, WorkloadError, builtin_path, read_jsonl

__all__ = [
    "BUILTIN_DIR",
    "FORMATS",
    "Prompt",
    "WorkloadError",
    "builtin_path",
    "load_prompts",
    "read_custom",
    "read_jsonl",
    "read_sharegpt",
    "read_spec_bench",
]
