"""``spectune plan`` on spaces naming models by hub id: it lists each hub model and whether
the local cache holds it, says when a CUDA job finds no GPU, downloads nothing, exits 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hf_cache import TINY, build_hf_cache
from tuner import cli, hub, preflight
from tuner.cli import _plan

REPO = Path(__file__).resolve().parents[2]
GPU_PRESET = REPO / "search_spaces" / "gpu-llama-3.1-8b-instruct.yaml"

SPACE = """
name: hub-plan
engine: {model: spectune/tiny-target, served_model_name: fake, device: DEVICE}
methods:
  draft_model: {num_speculative_tokens: {min: 1, max: 2}, drafts: [spectune/tiny-draft]}
  eagle3: {num_speculative_tokens: {min: 1, max: 2}, heads: [spectune/tiny-eagle3]}
max_num_seqs: [4]
concurrency: [1]
workload: {num_prompts: 4, max_tokens: 12}
"""


@pytest.fixture
def no_downloads(monkeypatch):
    """Any download fails the test; and no GPU on this machine, whatever it has."""

    def refuse(*a, **k):
        raise AssertionError("plan downloaded something")

    for mod in (hub, preflight):
        for name in ("fetch_model", "fetch_config_files", "remote_tensors"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, refuse)
    monkeypatch.setattr(_plan, "nvidia_smi", lambda query: None)


def _plan_of(capsys, path: Path) -> tuple[dict, str]:
    assert cli.main(["plan", str(path), "--json"]) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert cli.main(["plan", str(path)]) == cli.EXIT_OK
    return doc, capsys.readouterr().out


def test_plan_lists_cached_and_uncached_hub_models_and_the_gpu_need(
    tmp_path, monkeypatch, capsys, no_downloads
):
    cache = build_hf_cache(
        tmp_path / "hub",
        {"spectune/tiny-target": TINY / "target", "spectune/tiny-draft": TINY / "draft"},
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE")  # downloads allowed: still none from plan
    f = tmp_path / "space.yaml"
    f.write_text(SPACE.replace("DEVICE", "cuda"))
    doc, text = _plan_of(capsys, f)
    assert doc["hub_models"] == [
        {"field": "engine.model", "model": "spectune/tiny-target", "cached": True},
        {"field": "methods.draft_model.drafts", "model": "spectune/tiny-draft", "cached": True},
        {"field": "methods.eagle3.heads", "model": "spectune/tiny-eagle3", "cached": False},
    ]
    assert doc["preflight"]["refused"] == []
    assert doc["preflight"]["notes"] == [
        "methods.eagle3.heads: spectune/tiny-eagle3 is not in the local Hugging Face cache: "
        "the job downloads it before its first launch; checked then"
    ]
    assert doc["hardware"] == {"device": "cuda", "needs_gpu": True, "gpus": [], "gpu_found": False}
    assert "Hugging Face models: 3 (the job downloads 1 before its first launch)" in text
    assert "spectune/tiny-eagle3 (methods.eagle3.heads): NOT in the local cache" in text
    assert "spectune/tiny-target (engine.model): in the local cache" in text
    assert "this job needs a GPU (engine.device: cuda) and this machine has none" in text
    # on the CPU: no GPU needed, nothing said about one
    f.write_text(SPACE.replace("DEVICE", "cpu"))
    doc, text = _plan_of(capsys, f)
    assert doc["hardware"]["needs_gpu"] is False and "GPU" not in text


def test_plan_of_the_gpu_preset_offline_with_no_cache(empty_hf_cache, capsys, no_downloads):
    doc, text = _plan_of(capsys, GPU_PRESET)
    assert [h["model"] for h in doc["hub_models"] if not h["cached"]] == [
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    ]
    assert doc["preflight"]["refused"] == [] and doc["downloads_allowed"] is False
    assert (
        "engine.model: meta-llama/Llama-3.1-8B-Instruct is not in the local Hugging Face "
        "cache and HF_HUB_OFFLINE is set: checked at launch" in doc["preflight"]["notes"]
    )
    assert "HF_HUB_OFFLINE is set: no download, 3 checked at launch" in text
    assert "this job needs a GPU" in text


def test_plan_of_the_gpu_preset_when_downloads_are_allowed(
    empty_hf_cache, monkeypatch, capsys, no_downloads
):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    doc, text = _plan_of(capsys, GPU_PRESET)
    assert doc["downloads_allowed"] is True and len(doc["hub_models"]) == 3
    assert "Hugging Face models: 3 (the job downloads 3 before its first launch)" in text
