"""Workload files in the formats ``vllm bench serve`` reads, selected by ``workload.format``."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from tuner.measure import load_all_prompts
from tuner.space import SpaceError, WorkloadSpec, loads_space
from tuner.workloads import (
    FORMATS,
    Prompt,
    WorkloadError,
    load_prompts,
    read_custom,
    read_sharegpt,
    read_spec_bench,
)

DATA = Path(__file__).resolve().parent / "data"

SPACE = """
name: w
engine: {{model: m}}
methods: {{ngram: {{num_speculative_tokens: {{min: 1, max: 2}}}}}}
workload: {workload}
"""


def test_sharegpt_takes_the_first_turn_of_conversations_with_a_reply():
    assert read_sharegpt(DATA / "sharegpt.json") == [
        Prompt("Write a haiku about speculative decoding."),
        Prompt("What is n-gram prompt lookup?"),
    ]


def test_custom_jsonl_output_tokens_become_max_tokens():
    assert read_custom(DATA / "custom.jsonl") == [
        Prompt("What is the capital of India?", 10),
        Prompt("What is the capital of Iran?", None),
        Prompt("What is the capital of China?", 819),
    ]


def test_spec_bench_takes_the_first_turn():
    assert read_spec_bench(DATA / "spec_bench.jsonl") == [
        Prompt("Compose a travel blog post about Hawaii."),
        Prompt("Pretend you are Elon Musk. Why go to Mars?"),
    ]


def test_the_same_prompts_as_vllms_own_dataset_readers():
    """Parity with vLLM's ShareGPTDataset, CustomDataset and SpecBench on the same files."""
    datasets = pytest.importorskip("vllm.benchmarks.datasets")
    kw = {"disable_shuffle": True}
    share = datasets.ShareGPTDataset(dataset_path=str(DATA / "sharegpt.json"), **kw)
    custom = datasets.CustomDataset(dataset_path=str(DATA / "custom.jsonl"), **kw)
    spec = datasets.SpecBench(dataset_path=str(DATA / "spec_bench.jsonl"), **kw)
    assert [p.prompt for p in read_sharegpt(DATA / "sharegpt.json")] == [
        e["conversations"][0]["value"] for e in share.data
    ]
    assert [p.prompt for p in read_custom(DATA / "custom.jsonl")] == [
        e["prompt"] for e in custom.data
    ]
    assert [p.prompt for p in read_spec_bench(DATA / "spec_bench.jsonl")] == [
        e["prompt"] for e in spec.data
    ]


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        ("sharegpt", '{"conversations": []}', "a ShareGPT file is a JSON list"),
        ("sharegpt", "[1]", r"\[0\]: each entry must be a JSON object"),
        (
            "sharegpt",
            json.dumps([{"conversations": [{"from": "human", "value": ""}, {"value": "x"}]}]),
            r"\[0\]\.conversations\[0\]\.value: must be a non-empty string",
        ),
        ("sharegpt", json.dumps([{"conversations": [{"value": "x"}]}]), "has no prompts"),
        ("sharegpt", "[", "not JSON"),
        ("custom", '{"prompt": "a"}\n{"text": "b"}', ":2: prompt: must be a non-empty string"),
        ("custom", '{"prompt": "a", "output_tokens": 0}', ":1: output_tokens: must be a positive"),
        ("custom", '{"prompt": "a", "output_tokens": true}', ":1: output_tokens: must be a posi"),
        ("custom", "[1]", ":1: each line must be a JSON object"),
        ("spec_bench", '{"turns": []}', ":1: turns: must be a non-empty list"),
        ("spec_bench", '{"turns": [3]}', r":1: turns\[0\]: must be a non-empty string"),
        ("spec_bench", "\n\n", "has no prompts"),
    ],
)
def test_bad_files_are_refused_naming_the_field(tmp_path, fmt, text, message):
    p = tmp_path / "w.data"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(WorkloadError, match=message) as ei:
        load_prompts(p, fmt)
    assert str(p) in str(ei.value)


def test_unknown_format_and_missing_file():
    with pytest.raises(WorkloadError, match="format: unknown workload format 'csv'"):
        load_prompts(DATA / "custom.jsonl", "csv")
    with pytest.raises(WorkloadError, match="cannot read workload"):
        load_prompts(DATA / "missing.json", "sharegpt")


def test_the_space_offers_exactly_the_formats_there_are_readers_for():
    ann = WorkloadSpec.model_fields["format"].annotation
    assert set(typing.get_args(ann)) == set(FORMATS)


def test_format_is_selected_in_the_space_and_read_by_the_job(tmp_path):
    (tmp_path / "chats.json").write_text((DATA / "sharegpt.json").read_text())
    wl = "{builtin: null, path: chats.json, format: sharegpt, num_prompts: 4}"
    space = loads_space(SPACE.format(workload=wl), base_dir=tmp_path)
    assert space.workload.format == "sharegpt" and space.primary_workload == "chats"
    prompts = load_all_prompts(space)["chats"]
    assert [p.prompt for p in prompts] == [p.prompt for p in read_sharegpt(DATA / "sharegpt.json")]


@pytest.mark.parametrize(
    ("workload", "field", "reason"),
    [
        ("{builtin: null, path: a.json, format: csv}", "workload.format", "Input should be"),
        ("{builtin: chat, format: sharegpt}", "workload", "applies only to a path"),
    ],
)
def test_bad_format_is_refused_naming_the_field(workload, field, reason):
    with pytest.raises(SpaceError) as ei:
        loads_space(SPACE.format(workload=workload))
    assert any(
        ".".join(map(str, loc)) == field and reason in why for loc, why in ei.value.errors
    ), ei.value.errors
