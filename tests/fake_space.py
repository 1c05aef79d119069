"""A small FAKE job space (config and tokenizer files only, no weights) for tests that run
the whole job against the FAKE OpenAI server; the ``space_dir`` fixture is in conftest."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.space import loads_space


def _model(dir: Path, vocab: int, tokens: dict | None = None) -> Path:
    dir.mkdir(parents=True)
    (dir / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    (dir / "tokenizer.json").write_text(json.dumps({"model": {"vocab": tokens or {"a": 0}}}))
    return dir


SPACE = """
name: fake-job
engine: {{model: target, served_model_name: fake, startup_timeout_s: 30}}
methods:
  ngram: {{num_speculative_tokens: {{min: 1, max: 3}}}}
  draft_model: {{num_speculative_tokens: {{min: 1, max: 3}}, drafts: [{drafts}]}}
max_num_seqs: [4]
concurrency: [1, 2]
workload: {{num_prompts: 4, max_tokens: 12, warmup_requests: 1}}
slo: {{p99_tpot_ms: {slo}}}
measurement: {{confirm_top: {confirm}}}
trials: {trials}
seed: 3
search: {search}
"""


def make_space_dir(tmp_path: Path) -> Path:
    _model(tmp_path / "target", 100)
    _model(tmp_path / "good_draft", 100)
    _model(tmp_path / "bad_vocab", 200)
    return tmp_path


def _space(d: Path, drafts="good_draft", slo=1000, trials=8, confirm=2, search="guided"):
    text = SPACE.format(drafts=drafts, slo=slo, trials=trials, confirm=confirm, search=search)
    return loads_space(text, base_dir=d)
