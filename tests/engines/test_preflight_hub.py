"""Pre-flight on models named by Hugging Face hub id: read from the local cache like a folder,
"checked at launch" when not there (never refused for it), small files fetched only when
downloads are allowed and the caller lets it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.hf_cache import TINY, build_hf_cache
from tuner import preflight as pf
from tuner.engines import EngineConfig, build_env
from tuner.hub import HubError
from tuner.preflight import PreflightError, preflight

GIB = 2**30
TARGET, DRAFT = "spectune/tiny-target", "spectune/tiny-draft"


def _cfg(model=TARGET, spec=None, **kw) -> EngineConfig:
    return EngineConfig(model=model, speculative_config=spec, **kw)


def test_a_cached_hub_model_is_checked_as_its_folder_is(hf_cache):
    draft = {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 3}
    notes: list[str] = []
    hub_est = preflight(_cfg(spec=draft), memory_bytes=64 * GIB, notes=notes)
    folder = {**draft, "model": str(TINY / "draft")}
    folder_est = preflight(_cfg(str(TINY / "target"), folder), memory_bytes=64 * GIB)
    assert notes == [] and hub_est == folder_est  # same weights, same KV cache
    e3 = {"method": "eagle3", "model": "spectune/tiny-eagle3", "num_speculative_tokens": 2}
    preflight(_cfg(spec=e3), memory_bytes=None)
    wrong = {**e3, "model": "spectune/tiny-eagle"}
    with pytest.raises(PreflightError, match=r"^methods.eagle3.heads: spectune/tiny-eagle is not"):
        preflight(_cfg(spec=wrong), memory_bytes=None)


def test_a_cached_draft_of_another_vocabulary_is_refused_with_the_field(tmp_path, monkeypatch):
    other = tmp_path / "other"
    shutil.copytree(TINY / "draft", other)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = list(vocab)[:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # same size, two ids swapped
    (other / "tokenizer.json").write_text(json.dumps(tok))
    cache = build_hf_cache(
        tmp_path / "hub", {TARGET: TINY / "target", "spectune/other-draft": other}
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    spec = {"method": "draft_model", "model": "spectune/other-draft", "num_speculative_tokens": 2}
    with pytest.raises(PreflightError, match=r"^methods.draft_model.drafts: .*different ids"):
        preflight(_cfg(spec=spec), memory_bytes=None)


def test_not_in_the_cache_offline_is_checked_at_launch_never_refused(empty_hf_cache):
    draft = {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 2}
    notes: list[str] = []
    assert preflight(_cfg(spec=draft), memory_bytes=8 * GIB, notes=notes) is None
    assert notes == [
        "engine.model: spectune/tiny-target is not in the local Hugging Face cache and "
        "HF_HUB_OFFLINE is set: checked at launch",
        "methods.draft_model.drafts: spectune/tiny-draft is not in the local Hugging Face "
        "cache and HF_HUB_OFFLINE is set: checked at launch",
        "memory_fraction: not checked: the weights of spectune/tiny-target, "
        "spectune/tiny-draft are not in the local Hugging Face cache (their size is unknown "
        "until they are)",
    ]
    # a hub head, a hub MTP checkpoint: the same
    for spec in (
        {"method": "eagle3", "model": "spectune/tiny-eagle3", "num_speculative_tokens": 2},
        {"method": "mtp", "num_speculative_tokens": 1},
    ):
        preflight(_cfg(spec=spec), memory_bytes=None)
    # a missing *path* is still refused, naming the field
    with pytest.raises(PreflightError, match=r"^engine.model: /no/such is not a local model"):
        preflight(_cfg("/no/such"), memory_bytes=None)


def test_small_files_without_weights_check_everything_but_memory(tmp_path, monkeypatch):
    cache = build_hf_cache(
        tmp_path / "hub", {TARGET: TINY / "target", DRAFT: TINY / "draft"}, config_only=(DRAFT,)
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    notes: list[str] = []
    spec = {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 2}
    assert preflight(_cfg(spec=spec), memory_bytes=8 * GIB, notes=notes) is None
    assert notes == [
        "memory_fraction: not checked: the weights of spectune/tiny-draft are not in the "
        "local Hugging Face cache (their size is unknown until they are)"
    ]


def test_small_files_are_fetched_only_when_allowed_and_asked(empty_hf_cache, monkeypatch):
    fetched: list[str] = []

    def fake_fetch(model: str) -> Path:
        fetched.append(model)
        c = build_hf_cache(empty_hf_cache, {model: TINY / "target"}, config_only=(model,))
        return next((c / f"models--{model.replace('/', '--')}" / "snapshots").iterdir())

    monkeypatch.setattr(pf, "fetch_config_files", fake_fetch)
    notes: list[str] = []
    preflight(_cfg(), memory_bytes=None, notes=notes)  # HF_HUB_OFFLINE=1: no fetch
    assert fetched == [] and "checked at launch" in notes[0]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    notes = []
    preflight(_cfg(), memory_bytes=None, notes=notes, fetch=False)  # spectune plan
    assert fetched == [] and "the job downloads it before its first launch" in notes[0]
    preflight(_cfg(), memory_bytes=None, notes=(notes := []))  # allowed and asked
    assert fetched == [TARGET] and notes == []

    def fails(model: str) -> Path:
        raise HubError(f"{model} did not download (GatedRepoError: access is restricted)")

    monkeypatch.setattr(pf, "fetch_config_files", fails)
    with pytest.raises(PreflightError, match=r"^engine.model: org/gated did not download"):
        preflight(_cfg("org/gated"), memory_bytes=None)


def test_engines_get_no_hub_token(tmp_path):
    env = build_env(_cfg(), tmp_path, base={"HF_TOKEN": "hf_x", "HUGGING_FACE_HUB_TOKEN": "y"})
    assert "HF_TOKEN" not in env and "HUGGING_FACE_HUB_TOKEN" not in env
    assert env["HF_HUB_OFFLINE"] == "1"
    cache_env = build_env(_cfg(), tmp_path, base={"HF_HUB_CACHE": "/c", "HF_HOME": "/h"})
    assert cache_env["HF_HUB_CACHE"] == "/c" and cache_env["HF_HOME"] == "/h"
