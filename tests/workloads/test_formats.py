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
    read_chat,
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


def test_sharegpt_conversations_keep_every_user_turn_and_drop_the_datasets_replies():
    """Chat: each human turn is a turn of one conversation (the model answers each itself);
    raw mode: the first turn, as vLLM's ShareGPTDataset, of conversations with a reply."""
    got = read_sharegpt(DATA / "sharegpt.json")
    assert [(p.messages, p.followups) for p in got] == [
        ((("user", "Write a haiku about speculative decoding."),), ()),
        ((("user", "What is n-gram prompt lookup?"),), ("And when does it help?",)),
    ]
    assert [p.as_raw() for p in got] == [
        Prompt("Write a haiku about speculative decoding."),
        Prompt("What is n-gram prompt lookup?"),
    ]
    assert [p.turns for p in load_prompts(DATA / "sharegpt.json", "sharegpt")] == [1, 2]
    assert [p.turns for p in load_prompts(DATA / "sharegpt.json", "sharegpt", max_turns=1)] == [
        1,
        1,
    ]


def test_sharegpt_system_turns_lead_and_unknown_speakers_are_refused(tmp_path):
    p = tmp_path / "s.json"
    conv = [
        {"from": "system", "value": "Be brief."},
        {"from": "gpt", "value": "Hello!"},
        {"from": "human", "value": "Hi"},
        {"from": "gpt", "value": "Hey"},
    ]
    p.write_text(json.dumps([{"conversations": conv}]))
    (got,) = read_sharegpt(p)
    assert got.messages == (("system", "Be brief."), ("user", "Hi")) and got.followups == ()
    conv[2]["from"] = "robot"
    p.write_text(json.dumps([{"conversations": conv}]))
    with pytest.raises(WorkloadError, match=r"\[0\]\.conversations\[2\]\.from: unknown speaker"):
        read_sharegpt(p)


def test_chat_jsonl_is_sent_as_written_through_the_template(tmp_path):
    p = tmp_path / "c.jsonl"
    rows = [
        {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]},
        {"messages": [{"role": "user", "content": "V"}], "max_tokens": 7, "followups": ["W"]},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    assert read_chat(p) == [
        Prompt("", None, (("system", "S"), ("user", "U"))),
        Prompt("", 7, (("user", "V"),), ("W",)),
    ]
    with pytest.raises(WorkloadError, match="need the chat template"):
        load_prompts(p, "chat", chat=False)


def test_a_plain_prompt_sent_as_chat_is_one_user_message():
    got = load_prompts(DATA / "custom.jsonl", "custom", chat=True)
    assert got[0] == Prompt("", 10, (("user", "What is the capital of India?"),))


def test_custom_jsonl_output_tokens_become_max_tokens():
    assert read_custom(DATA / "custom.jsonl") == [
        Prompt("What is the capital of India?", 10),
        Prompt("What is the capital of Iran?", None),
        Prompt("What is the capital of China?", 819),
    ]


def test_spec_bench_keeps_its_second_turns():
    got = read_spec_bench(DATA / "spec_bench.jsonl")
    assert [(p.messages, p.followups) for p in got] == [
        (
            (("user", "Compose a travel blog post about Hawaii."),),
            ("Rewrite it so every sentence starts with A.",),
        ),
        ((("user", "Pretend you are Elon Musk. Why go to Mars?"),), ()),
    ]
    assert [p.as_raw() for p in got] == [
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
    assert [p.prompt for p in load_prompts(DATA / "sharegpt.json", "sharegpt", chat=False)] == [
        e["conversations"][0]["value"] for e in share.data
    ]
    assert [p.prompt for p in read_custom(DATA / "custom.jsonl")] == [
        e["prompt"] for e in custom.data
    ]
    raw = load_prompts(DATA / "spec_bench.jsonl", "spec_bench", chat=False)
    assert [p.prompt for p in raw] == [e["prompt"] for e in spec.data]


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
        ("chat", '{"messages": []}', ":1: messages: must be a non-empty list"),
        ("chat", '{"messages": [{"role": "bot", "content": "x"}]}', r"messages\[0\]\.role"),
        ("chat", '{"messages": [{"role": "user", "content": [1]}]}', r"messages\[0\]\.content"),
        (
            "chat",
            json.dumps(
                {"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]}
            ).replace("}]}", ', "content": "b"}]}'),
            "the last message must be the user's",
        ),
        (
            "chat",
            '{"messages": [{"role": "user", "content": "a"}], "followups": [""]}',
            "followups",
        ),
        (
            "chat",
            '{"messages": [{"role": "user", "content": "a"}], "max_tokens": 0}',
            "max_tokens",
        ),
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
    assert space.workload.endpoint == "chat"
    assert prompts == [p.as_chat() for p in read_sharegpt(DATA / "sharegpt.json")]
    raw = loads_space(SPACE.format(workload=wl[:-1] + ", raw: true}"), base_dir=tmp_path)
    assert raw.workload.endpoint == "completions"
    assert [p.prompt for p in load_all_prompts(raw)["chats"]] == [
        p.prompt for p in read_sharegpt(DATA / "sharegpt.json")
    ]


def test_builtins_are_raw_unless_the_workload_asks_for_chat():
    space = loads_space(SPACE.format(workload="{builtin: chat, raw: false, max_turns: 1}"))
    assert space.workload.endpoint == "chat"
    assert all(p.chat for p in load_all_prompts(space)["chat"])
    assert loads_space(SPACE.format(workload="{builtin: chat}")).workload.endpoint == (
        "completions"
    )


@pytest.mark.parametrize(
    ("workload", "field", "reason"),
    [
        ("{builtin: null, path: a.json, format: csv}", "workload.format", "Input should be"),
        ("{builtin: chat, format: sharegpt}", "workload", "applies only to a path"),
        ("{builtin: null, path: a.jsonl, format: chat, raw: true}", "workload", "need the chat"),
        ("{builtin: chat, chat_template_kwargs: {a: 1}}", "workload", "only to chat requests"),
        ("{builtin: chat, max_turns: 2}", "workload", "only to chat requests"),
    ],
)
def test_bad_format_is_refused_naming_the_field(workload, field, reason):
    with pytest.raises(SpaceError) as ei:
        loads_space(SPACE.format(workload=workload))
    assert any(
        ".".join(map(str, loc)) == field and reason in why for loc, why in ei.value.errors
    ), ei.value.errors
