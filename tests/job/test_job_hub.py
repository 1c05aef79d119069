"""Jobs whose models are Hugging Face hub ids, on the FAKE engine (it measures nothing real):
the engine gets the id as written, the job fetches what it may launch before the first launch,
a model that does not download fails its candidates with the field named, and the user's
HF_TOKEN ends up in no stored row, log or export."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.faults.faultkit import HERE as FAULTS
from tests.helpers import run_fake_job
from tests.hf_cache import TINY, TINY_IDS, build_hf_cache
from tuner import cli
from tuner.engines import EXPORT_FORMAT_NAMES
from tuner.hub import HubError
from tuner.measure import _hub
from tuner.space import loads_space
from tuner.storage import Store

SPACE = """
name: hub-job
engine: {{model: spectune/tiny-target, served_model_name: fake, startup_timeout_s: 30}}
methods:
  ngram: {{num_speculative_tokens: {{min: 1, max: 2}}}}
  draft_model: {{num_speculative_tokens: {{min: 1, max: 2}}, drafts: [{draft}]}}
{more}max_num_seqs: [4]
concurrency: [1, 2]
workload: {{num_prompts: 4, max_tokens: 12, warmup_requests: 1}}
slo: {{p99_tpot_ms: 1000}}
measurement: {{repeats: 2, max_relative_mad: 10, confirm_top: 0}}
start_with:
  - {{method: draft_model, num_speculative_tokens: 2}}
{start}trials: {trials}
offline_pricing: {pricing}
seed: 3
"""


def _space(tmp_path, draft="spectune/tiny-draft", more="", start="", trials=3, pricing="true"):
    text = SPACE.format(draft=draft, more=more, start=start, trials=trials, pricing=pricing)
    return loads_space(text, base_dir=tmp_path)


def _rows(db_url: str, job_id: int):
    return {r.number: r for r in Store(db_url).trials(job_id)}


def test_the_fake_engine_is_launched_with_the_hub_id_as_written(hf_cache, tmp_path, db_url):
    job_id = run_fake_job(db_url, _space(tmp_path), tmp_path / "w")
    rows = _rows(db_url, job_id)
    # the baseline and the draft (start_with); a third launch only if the fake's timing,
    # which load moves, leaves something that can still win: not what this test is about
    assert len(rows) >= 2 and {r.state for r in rows.values()} == {"complete"}
    for r in rows.values():
        argv = Path(r.log_path).read_text().splitlines()[0]
        assert "--model spectune/tiny-target " in argv
        assert r.engine_config["model"] == "spectune/tiny-target"
    draft = next(r for r in rows.values() if r.method == "draft_model")
    assert '"model":"spectune/tiny-draft"' in Path(draft.log_path).read_text().splitlines()[0]
    assert draft.search.get("preflight") is None  # everything was in the cache: all checked


def test_not_cached_offline_is_launched_and_noted_on_the_trial(empty_hf_cache, tmp_path, db_url):
    """The FAKE engine loads nothing, so it starts; vLLM would fail at its launch."""
    job_id = run_fake_job(db_url, _space(tmp_path, trials=2, pricing="false"), tmp_path / "w")
    base = _rows(db_url, job_id)[0]
    assert base.state == "complete"
    assert base.search["preflight"][0] == (
        "engine.model: spectune/tiny-target is not in the local Hugging Face cache and "
        "HF_HUB_OFFLINE is set: checked at launch"
    )


@pytest.fixture
def downloads(tmp_path, monkeypatch):
    """Downloads allowed, answered from the tiny models (no network): the cache starts with
    the small files of the target and the draft only, a fetch completes a model, and
    ``spectune/gone`` fails as a gated repository without access does. What was fetched."""
    cache = build_hf_cache(tmp_path / "hub", config_only=tuple(TINY_IDS))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    fetched: list[str] = []

    def fetch(model: str) -> Path:
        fetched.append(model)
        if model not in TINY_IDS:
            raise HubError(f"{model} did not download (GatedRepoError: 401 Client Error)")
        build_hf_cache(cache, {model: TINY_IDS[model]})
        return cache

    monkeypatch.setattr(_hub, "fetch_model", fetch)
    monkeypatch.setattr(_hub, "fetch_config_files", fetch)
    return fetched


def test_the_job_fetches_what_it_may_launch_before_the_first_launch(downloads, tmp_path):
    # a draft of another vocabulary: refused by pre-flight on its small files, never fetched
    other = tmp_path / "other"
    other.mkdir()
    cfg = json.loads((TINY / "draft" / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "vocab_size": 999}))
    build_hf_cache(Path(os.environ["HF_HUB_CACHE"]), {"spectune/other-vocab": other})
    space = _space(tmp_path, draft="spectune/other-vocab")
    hub = _hub.HubModels(space)
    hub.prepare()
    assert downloads == ["spectune/tiny-target"]
    hub.prepare()
    assert downloads == ["spectune/tiny-target"]  # once per job
    _hub.HubModels(space).prepare()  # the next job: in the cache with its weights, used as is
    assert downloads == ["spectune/tiny-target"]


def test_hf_token_is_never_stored_logged_or_exported(
    downloads, tmp_path, db_url, monkeypatch, capsys, caplog
):
    secret = "hf_secretTOKEN0123456789abcdefXYZ"
    monkeypatch.setenv("HF_TOKEN", secret)
    caplog.set_level("DEBUG")
    more = "  eagle3: {num_speculative_tokens: {min: 1, max: 2}, heads: [spectune/gone]}\n"
    start = "  - {method: eagle3, num_speculative_tokens: 2}\n"
    space = _space(tmp_path, more=more, start=start, trials=4, pricing="false")
    dump = tmp_path / "engine-env.json"
    launcher = [sys.executable, str(FAULTS / "env_engine.py"), "--dump-env", str(dump)]
    job_id = run_fake_job(db_url, space, tmp_path / "w", launcher)
    rows = _rows(db_url, job_id)
    # fetched before the first launch: the target and the draft; the head failed
    assert downloads[:3] == ["spectune/gone", "spectune/tiny-target", "spectune/tiny-draft"]
    head = next(r for r in rows.values() if r.method == "eagle3")
    assert head.fail_reason == "invalid_config"
    assert head.fail_detail.startswith("pre-flight: methods.eagle3.heads: spectune/gone did not")
    assert "HF_TOKEN" not in json.loads(dump.read_text())  # the engine never had it
    # exported: every format, and the read models
    for fmt in EXPORT_FORMAT_NAMES:
        cli.main(["export", str(job_id), "--format", fmt, "--db", db_url])
    for args in (["trials", str(job_id), "--json"], ["report", str(job_id), "--json"]):
        cli.main([*args, "--db", db_url])
    printed = capsys.readouterr()
    assert "spectune/tiny-target" in printed.out
    assert secret not in printed.out + printed.err
    # stored and logged: the database file, every log and file the job wrote, the job's log
    db_file = Path(db_url.removeprefix("sqlite:///"))
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != dump]
    assert db_file in written and any(p.suffix == ".log" for p in written)
    for p in written:
        assert secret.encode() not in p.read_bytes(), p
    assert secret not in caplog.text
    assert any("spectune/tiny-target" in r.getMessage() for r in caplog.records)
