"""A FAKE surface for unit tests of the search: numbers from a formula, measured by nothing.

The real surface (bench/surfaces/) is recorded from vLLM by bench/record_surface.py; this one
only has the same format, so the replay backend, pruning and the benchmark can be tested in
seconds. Its header says ``"engine": "FAKE formula"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuner.space import loads_space
from tuner.surface import FORMAT, grid_configs

SPACE = """
name: fake-surface
engine: {model: target, served_model_name: fake}
methods:
  ngram:
    num_speculative_tokens: {min: 1, max: 4}
    prompt_lookup_min: {min: 1, max: 2}
    prompt_lookup_max: {min: 2, max: 3}
  draft_model: {num_speculative_tokens: {min: 1, max: 4}, drafts: [draft]}
max_num_seqs: [4, 8]
concurrency: [1, 4]
objective_concurrency: 1
workload: {builtin: code_completion, num_prompts: 4, max_tokens: 16}
measurement: {repeats: 3, confirm_top: 0}
slo: {p99_tpot_ms: 30}
start_with:
  - {method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 1, prompt_lookup_max: 3}
  - {method: draft_model, num_speculative_tokens: 3}
trials: 8
seed: 0
search: sampler  # its formula makes batch size matter, which the guided search rules out
"""


def tok_per_s(c: dict[str, Any], level: int) -> float:
    """Speculation pays at concurrency 1, less at 4; depth 3 is the sweet spot for drafts,
    2 for n-grams; batch size 8 is a little slower."""
    base = 60.0 if level == 1 else 150.0
    k = c.get("num_speculative_tokens", 0)
    gain = {
        "none": 0.0,
        "ngram": 12 * k - 3 * k * k + (2 if c.get("prompt_lookup_min") == 1 else 0),
        "draft_model": 16 * k - 2.6 * k * k,
    }[c["method"]]
    if level > 1:
        gain = gain * 0.3 - 8 * k
    return base + gain - (2.0 if c["max_num_seqs"] == 8 else 0.0)


def _metrics(c: dict[str, Any], level: int) -> dict[str, Any]:
    tps = tok_per_s(c, level)
    p99 = 1000.0 / tps * 1.3 * level**0.5

    def st(v: float) -> dict[str, float]:
        return {"median": v, "mad": v * 0.005, "ci95_low": v * 0.99, "ci95_high": v * 1.01, "n": 3}

    return {
        "workload": "code_completion",
        "concurrency": level,
        "output_tok_per_s": tps,
        "p99_tpot_ms": p99,
        "mean_tpot_ms": 1000.0 / tps,
        "mean_e2e_ms": 16 * 1000.0 / tps,  # 16 tokens a request
        "output_tokens": 4 * 16,
        "num_ok": 4,
        "num_failed": 0,
        "num_requests": 4,
        "noisy": False,
        "acceptance_rate": None if c["method"] == "none" else 0.5,
        "mean_acceptance_length": None
        if c["method"] == "none"
        else 1 + 0.5 * c["num_speculative_tokens"],
        "stats": {"output_tok_per_s": st(tps), "p99_tpot_ms": st(p99)},
        "score": {"output_tok_per_s": tps * 0.995, "p99_tpot_ms": p99 * 1.005},
    }


def write_rows(
    path: Path,
    space_text: str,
    metrics: Any,
    engine: str,
    kv_tokens: Any = None,
) -> Path:
    """A surface file of every grid configuration of ``space_text`` at every level, with
    ``metrics(config, level)`` (and ``kv_tokens(config)``) for numbers."""
    space = loads_space(space_text, base_dir=path.parent)
    header = {
        "format": FORMAT,
        "space": space.model_dump(mode="json"),
        "recorded": {"engine": engine, "job_id": None},
    }
    lines = [json.dumps(header)]
    for c in grid_configs(space):
        for level in space.concurrency:
            row = {
                "config": c,
                "state": "complete",
                "workload": "code_completion",
                "concurrency": level,
                "metrics": metrics(c, level),
                "startup_s": 30.0,
                "lossless_match_rate": 1.0,
            }
            if kv_tokens is not None:
                row["kv_cache_tokens"] = kv_tokens(c)
            lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_fake_surface(path: Path, space_text: str = SPACE) -> Path:
    return write_rows(path, space_text, _metrics, "FAKE formula")
