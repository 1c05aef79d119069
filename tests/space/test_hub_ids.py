"""Models named by Hugging Face hub id: the path-or-id rule, and a space of hub ids that
validates with no network at all (``spectune validate`` is schema-only)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.hf_cache import repo_folder
from tuner import cli, hub
from tuner.candidates import engine_config, grid_configs, space_models
from tuner.space import loads_space

REPO = Path(__file__).resolve().parents[2]
GPU_PRESET = REPO / "search_spaces" / "gpu-llama-3.1-8b-instruct.yaml"

HUB_SPACE = """
name: hub-ids
engine: {model: spectune/tiny-target, served_model_name: fake}
methods:
  draft_model: {num_speculative_tokens: {min: 1, max: 2}, drafts: [spectune/tiny-draft]}
  eagle3: {num_speculative_tokens: {min: 1, max: 2}, heads: [spectune/tiny-eagle3]}
  mtp: {num_speculative_tokens: {min: 1, max: 1}, model: spectune/tiny-target-mtp}
max_num_seqs: [4]
concurrency: [1]
"""


def test_a_path_is_what_exists_or_looks_like_one_and_a_hub_id_the_rest(tmp_path):
    (tmp_path / "org" / "local").mkdir(parents=True)
    (tmp_path / "plain").mkdir()
    r = hub.resolve_model
    # exists relative to the space's folder: a path, even when it reads as an id
    assert r("org/local", tmp_path) == str(tmp_path / "org" / "local")
    assert r("plain", tmp_path) == str(tmp_path / "plain")
    # written as a path: a path, whether or not it exists
    assert r("./org/missing", tmp_path) == str(tmp_path / "org" / "missing")
    assert r("../elsewhere", tmp_path) == str((tmp_path / ".." / "elsewhere").resolve())
    assert r("/abs/model", tmp_path) == "/abs/model"
    assert r("~/m", tmp_path) == str(Path("~/m").expanduser())
    # otherwise a hub id as written, by huggingface_hub's rules
    assert r("meta-llama/Llama-3.1-8B-Instruct", tmp_path) == "meta-llama/Llama-3.1-8B-Instruct"
    assert r("gpt2", tmp_path) == "gpt2"
    # not an id (two slashes, "--", a space): a path, refused later by pre-flight
    for bad in ("a/b/c", "org--x/name", "has space/x"):
        assert r(bad, tmp_path) == str(tmp_path / bad)
    assert hub.is_hub_id("meta-llama/Llama-3.1-8B-Instruct")
    assert not hub.is_hub_id(str(tmp_path / "plain")) and not hub.is_hub_id("./x")


def test_the_engine_gets_the_hub_id_as_written_and_a_path_resolved(tmp_path):
    space = loads_space(HUB_SPACE, base_dir=tmp_path)
    fields = dict((m, f) for f, m in space_models(space))
    assert fields == {
        "spectune/tiny-target": "engine.model",
        "spectune/tiny-draft": "methods.draft_model.drafts",
        "spectune/tiny-eagle3": "methods.eagle3.heads",
        "spectune/tiny-target-mtp": "methods.mtp.model",
    }
    cfgs = [engine_config(c, space) for c in grid_configs(space)]
    models = {c.model for c in cfgs}
    assert models == {"spectune/tiny-target", "spectune/tiny-target-mtp"}
    specs = {
        c.speculative_config["model"]
        for c in cfgs
        if c.speculative_config and c.speculative_config.get("model")
    }
    assert specs == {"spectune/tiny-draft", "spectune/tiny-eagle3"}
    # a folder named like the id beside the space is a path: the space's own checkpoint
    (tmp_path / "spectune" / "tiny-draft").mkdir(parents=True)
    local = dict(space_models(loads_space(HUB_SPACE, base_dir=tmp_path)))
    assert local["methods.draft_model.drafts"] == str(tmp_path / "spectune" / "tiny-draft")


def _no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every way out fails the test: sockets, and huggingface_hub's calls."""
    calls: list[str] = []

    def refuse(*a, **k):
        calls.append(repr(a)[:80])
        raise AssertionError("network call during validate")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for name in ("fetch_model", "fetch_config_files", "remote_tensors"):
        monkeypatch.setattr(hub, name, refuse)
    return calls


@pytest.mark.parametrize("offline", [True, False])
def test_validate_accepts_hub_ids_and_never_reaches_the_network(
    tmp_path, monkeypatch, capsys, offline
):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    calls = _no_network(monkeypatch)
    f = tmp_path / "hub.yaml"
    f.write_text(HUB_SPACE)
    assert cli.main(["validate", str(f), "--json"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["valid"] is True
    assert cli.main(["validate", str(GPU_PRESET)]) == cli.EXIT_OK
    assert "valid (gpu-llama-3.1-8b-instruct" in capsys.readouterr().out
    assert calls == []
    assert not (tmp_path / "empty").exists()  # nothing was written to a cache either


def test_the_gpu_preset_names_its_models_by_hub_id():
    from tuner.space import load_space

    space = load_space(GPU_PRESET)
    assert space.engine.device == "cuda" and not space.engine.enforce_eager
    assert space.memory_fraction == [0.8, 0.9]
    assert dict(space_models(space)) == {
        "engine.model": "meta-llama/Llama-3.1-8B-Instruct",
        "methods.draft_model.drafts": "meta-llama/Llama-3.2-1B-Instruct",
        "methods.eagle3.heads": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    }
    assert set(space.slo.limits()) == {"p99_ttft_ms", "p99_tpot_ms"}
    # chat requests through the model's template; batch size a real axis that queues at 32
    assert space.workload.endpoint == "chat" and space.workload.builtin == "conversations"
    assert space.max_num_seqs == [16, 32] and max(space.concurrency) == 32


def test_the_offline_cache_is_what_huggingface_hub_reads(hf_cache):
    """The helper's layout, checked with huggingface_hub's own API (HF_HUB_CACHE, offline)."""
    from huggingface_hub import scan_cache_dir, snapshot_download

    snap = Path(
        snapshot_download("spectune/tiny-target", local_files_only=True, cache_dir=hf_cache)
    )
    assert snap.parent.parent == repo_folder(hf_cache, "spectune/tiny-target")
    assert (snap / "config.json").is_symlink() and (snap / "model.safetensors").is_file()
    info = scan_cache_dir(hf_cache)
    assert info.warnings == []
    repos = {r.repo_id: r for r in info.repos}
    assert set(repos) >= {f"spectune/tiny-{n}" for n in ("target", "draft", "eagle", "eagle3")}
    assert all(sorted(rv.refs) == ["main"] for r in repos.values() for rv in r.revisions)
    assert hub.local_view("spectune/tiny-draft", weights=True) == Path(
        snapshot_download("spectune/tiny-draft", local_files_only=True, cache_dir=hf_cache)
    )
    assert hub.local_view("spectune/not-there") is None


def test_a_fetch_asks_for_what_an_engine_loads_into_the_current_cache(tmp_path, monkeypatch):
    import huggingface_hub

    files = {"org/m": ["config.json", "model-1.safetensors", "original/consolidated.00.pth"]}
    files["org/old-head"] = ["config.json", "pytorch_model.bin"]
    asked: dict = {}

    def snapshot(repo_id, **kw):
        if repo_id == "org/gated":
            raise RuntimeError("401 Client Error: access to model org/gated is restricted")
        asked[repo_id] = kw
        return str(tmp_path / repo_id)

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", lambda self, r: files.get(r, []))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub.fetch_model("org/m") == tmp_path / "org" / "m"
    assert hub.fetch_model("org/old-head") == tmp_path / "org" / "old-head"
    m, old = asked["org/m"], asked["org/old-head"]
    assert m["cache_dir"] == tmp_path / "c" and m["ignore_patterns"] == ["original/*"]
    assert {"*.json", "*.safetensors", "tokenizer*", "*.jinja"} <= set(m["allow_patterns"])
    assert "*.bin" not in m["allow_patterns"]  # safetensors there: no pickles
    assert {"*.bin", "*.pth"} <= set(old["allow_patterns"])  # only pickles: those
    with pytest.raises(hub.HubError, match=r"^org/gated did not download \(RuntimeError: 401"):
        hub.fetch_model("org/gated")
    monkeypatch.setenv("HF_HUB_OFFLINE", "true")
    assert not hub.downloads_allowed()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    assert not hub.downloads_allowed()
    monkeypatch.delenv("TRANSFORMERS_OFFLINE")
    assert hub.downloads_allowed()
