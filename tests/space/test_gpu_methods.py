"""DFlash, DSpark and the GPU n-gram lookup in the space (issue 34): validated, exported for
vLLM on a GPU, refused by pre-flight where they cannot run (the GPU lookup on CPU) or cannot
serve the target (a draft reading layers the target does not have). No checkpoint of either
draft exists here, so none is launched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.test_engine_exports import _cfg
from tuner._stacked_heads import HEAD_PROBLEMS
from tuner.candidates import grid_configs, speculative_config
from tuner.engines import ExportUnsupported, render_export
from tuner.engines._vllm import VLLMServer
from tuner.methods import params_text
from tuner.space import loads_space

REPO = Path(__file__).resolve().parents[2]

SPACE = """
name: gpu-proposers
engine: {model: Qwen/Qwen3-8B, device: cuda}
methods:
  ngram_gpu:
    num_speculative_tokens: {min: 3, max: 4}
    prompt_lookup_min: {min: 2, max: 2}
    prompt_lookup_max: {min: 4, max: 4}
  dflash: {num_speculative_tokens: {min: 7, max: 7}, heads: [z-lab/Qwen3-8B-DFlash-b16]}
  dspark: {num_speculative_tokens: {min: 7, max: 7}, heads: [deepseek-ai/dspark_qwen3_8b_block7]}
start_with:
  - {method: dflash, num_speculative_tokens: 7, head: z-lab/Qwen3-8B-DFlash-b16}
"""


def test_validate_accepts_a_space_naming_dflash_dspark_and_ngram_gpu(tmp_path):
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
    assert json.loads(got.stdout)["methods"] == ["ngram_gpu", "dflash", "dspark"]


def test_each_reaches_vllms_config_and_the_other_engines_say_they_cannot():
    space = loads_space(SPACE)
    by = {c["method"]: c for c in grid_configs(space) if c["method"] != "none"}
    assert set(by) == {"ngram_gpu", "dflash", "dspark"}
    assert speculative_config(by["dflash"], space) == {
        "method": "dflash",
        "model": "z-lab/Qwen3-8B-DFlash-b16",
        "num_speculative_tokens": 7,
    }
    lookup = speculative_config(by["ngram_gpu"], space)
    assert lookup["method"] == "ngram_gpu" and lookup["prompt_lookup_max"] == 4
    assert "lookup=2..4" in params_text(by["ngram_gpu"])
    for c in by.values():
        spec = speculative_config(c, space)
        assert json.loads(render_export("vllm-json", _cfg(spec))) == spec
        for fmt in ("sglang", "trtllm-yaml"):
            with pytest.raises(ExportUnsupported, match=repr(c["method"])):
                render_export(fmt, _cfg(spec))


def test_a_start_point_may_name_a_head_of_any_method_with_heads():
    space = loads_space(SPACE)
    assert space.start_with[0].head == "z-lab/Qwen3-8B-DFlash-b16"
    with pytest.raises(ValueError, match="is not one of methods.dspark.heads"):
        loads_space(SPACE.replace("{method: dflash,", "{method: dspark,"))


def test_the_gpu_lookup_is_refused_on_cpu_before_a_launch():
    spec = {"method": "ngram_gpu", "num_speculative_tokens": 3, **{"prompt_lookup_min": 2}}
    why = VLLMServer.speculative_problem(spec, "cpu")
    assert why is not None and why.startswith("methods.ngram_gpu: vLLM runs ngram_gpu only")
    assert VLLMServer.speculative_problem(spec, "cuda") is None
    # DFlash is not refused on CPU: vLLM 0.32's CPU platform patches its input kernel.
    assert VLLMServer.speculative_problem({"method": "dflash", "model": "/d"}, "cpu") is None


@pytest.mark.parametrize(
    ("hcfg", "why"),
    [
        ({"dflash_config": {"target_layer_ids": [1, 17, 36]}}, "reads target layers [36]"),
        ({"target_layer_ids": [1, 2], "vocab_size": 99}, "draft vocab_size 99 != target 100"),
        ({"dspark_target_layer_ids": [-1]}, "reads target layers [-1]"),
        ({"dflash_config": {"target_layer_ids": [1, 17, 35]}, "vocab_size": 100}, None),
    ],
)
def test_a_block_draft_must_read_layers_the_target_has(hcfg, why):
    tcfg = {"num_hidden_layers": 36, "vocab_size": 100}
    for method in ("dflash", "dspark"):
        got = HEAD_PROBLEMS[method](tcfg, hcfg, {"method": method, "num_speculative_tokens": 7})
        assert (got is None) if why is None else (why in got), got
