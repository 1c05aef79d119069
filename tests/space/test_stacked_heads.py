"""Medusa heads and MLP speculators in the space (issue 34): validated, exported for vLLM,
refused by pre-flight where they cannot run (the installed vLLM's runner has no MLP
speculator) or cannot fit the target (head count, width, vocabulary)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.test_engine_exports import _cfg
from tuner._stacked_heads import stacked_head_problem
from tuner.candidates import grid_configs, speculative_config
from tuner.engines import ExportUnsupported, _vllm, render_export
from tuner.engines._vllm import VLLMServer
from tuner.space import loads_space

REPO = Path(__file__).resolve().parents[2]

SPACE = """
name: every-vllm-proposer
engine: {model: meta-llama/Llama-3.1-8B-Instruct, device: cuda}
methods:
  suffix: {num_speculative_tokens: {min: 8, max: 8}}
  medusa: {num_speculative_tokens: {min: 2, max: 3}, heads: [org/medusa-llama-3.1-8b]}
  mlp_speculator: {num_speculative_tokens: {min: 3, max: 3}, heads: [org/llama3-8b-accelerator]}
"""


def test_validate_accepts_a_space_naming_suffix_medusa_and_mlp_speculator(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SPACE)
    got = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "validate", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["methods"] == ["suffix", "medusa", "mlp_speculator"]


def test_each_head_is_a_searched_choice_and_reaches_vllms_config():
    space = loads_space(SPACE)
    medusa = [c for c in grid_configs(space) if c["method"] == "medusa"]
    assert [c["num_speculative_tokens"] for c in medusa] == [2, 3]
    spec = speculative_config(medusa[0], space)
    assert spec == {
        "method": "medusa",
        "model": "org/medusa-llama-3.1-8b",
        "num_speculative_tokens": 2,
    }
    assert json.loads(render_export("vllm-json", _cfg(spec))) == spec
    for fmt in ("sglang", "trtllm-yaml"):
        with pytest.raises(ExportUnsupported, match="'medusa'"):
            render_export(fmt, _cfg(spec))


def test_pre_flight_refuses_an_mlp_speculator_the_runner_cannot_build(monkeypatch):
    spec = {"method": "mlp_speculator", "model": "/h", "num_speculative_tokens": 3}
    monkeypatch.setattr(_vllm, "vllm_runner_has", lambda m: False)
    why = VLLMServer.speculative_problem(spec)
    assert why is not None and why.startswith("methods.mlp_speculator: ")
    monkeypatch.setattr(_vllm, "vllm_runner_has", lambda m: True)
    assert VLLMServer.speculative_problem(spec) is None


def test_the_installed_vllm_runner_has_medusa_and_no_mlp_speculator():
    """vLLM 0.32, read from its source: what the refusal above rests on."""
    if _vllm.vllm_runner_has("medusa") is None:
        pytest.skip("vLLM is not installed")
    assert _vllm.vllm_runner_has("medusa") and _vllm.vllm_runner_has("suffix")
    assert _vllm.vllm_runner_has("mlp_speculator") is False


@pytest.mark.parametrize(
    ("method", "hcfg", "k", "why"),
    [
        (
            "medusa",
            {"num_heads": 2, "hidden_size": 64, "vocab_size": 100},
            3,
            "exceeds the checkpoint's 2 heads",
        ),
        (
            "medusa",
            {"num_heads": 4, "hidden_size": 32, "vocab_size": 100},
            3,
            "hidden state of 32, the target has 64",
        ),
        (
            "mlp_speculator",
            {"n_predict": 3, "emb_dim": 64, "vocab_size": 99},
            3,
            "vocab_size 99 != target 100",
        ),
        ("mlp_speculator", {"n_predict": 3, "emb_dim": 64, "vocab_size": 100}, 3, None),
    ],
)
def test_heads_must_fit_the_target_and_the_depth(method, hcfg, k, why):
    spec = {"method": method, "num_speculative_tokens": k}
    got = stacked_head_problem({"hidden_size": 64, "vocab_size": 100}, hcfg, spec)
    assert (got is None) if why is None else (why in got)
