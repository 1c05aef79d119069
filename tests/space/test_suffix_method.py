"""Suffix decoding as a searched method: its knobs in the space (each a searched axis when
listed), the grid, the speculative config vLLM is launched with and exported to, the engines
that cannot express it, and pre-flight without Arctic Inference."""

from __future__ import annotations

import json

import pytest

from tests.engines.test_engine_exports import _cfg
from tuner.candidates import grid_configs, speculative_config
from tuner.engines import ExportUnsupported, _vllm, render_export
from tuner.engines._vllm import VLLMServer
from tuner.methods import params_text
from tuner.space import SpaceError, loads_space

SPACE = """
name: t
engine: {model: m}
methods:
  suffix:
    num_speculative_tokens: {min: 8, max: 8}
    max_cached_requests: [0, 10000]
"""


def test_listed_knobs_are_searched_and_reach_the_engine_and_the_export():
    space = loads_space(SPACE)
    suffix = [c for c in grid_configs(space) if c["method"] == "suffix"]
    assert [c["max_cached_requests"] for c in suffix] == [0, 10000]
    assert all("max_tree_depth" not in c for c in suffix)  # left out: the engine's default
    spec = speculative_config(suffix[0], space)
    assert spec == {
        "method": "suffix",
        "num_speculative_tokens": 8,
        "suffix_decoding_max_cached_requests": 0,
    }
    assert params_text(suffix[0]) == "suffix k=8 cached=0"
    assert json.loads(render_export("vllm-json", _cfg(spec))) == spec
    assert "--speculative-config" in render_export("vllm-cli", _cfg(spec))


def test_sglang_and_tensorrt_llm_say_they_cannot_express_it():
    spec = {"method": "suffix", "num_speculative_tokens": 8}
    with pytest.raises(ExportUnsupported, match="'suffix' has no SGLang equivalent"):
        render_export("sglang", _cfg(spec))
    with pytest.raises(ExportUnsupported, match="TensorRT-LLM has no decoding type for 'suffix'"):
        render_export("trtllm-yaml", _cfg(spec))


@pytest.mark.parametrize(
    ("knob", "value", "why"),
    [
        ("min_token_prob", "[1.5]", "less than or equal to 1"),
        ("max_spec_factor", "[0]", "greater than 0"),
        ("max_cached_requests", "[-1]", "greater than or equal to 0"),
        ("max_tree_depth", "[24, 24]", "values must not repeat"),
        ("max_tree_depth", "[]", "at least 1 item"),
        ("max_tree_dept", "[24]", "Extra inputs are not permitted"),
    ],
)
def test_a_bad_knob_is_refused_naming_its_field(knob, value, why):
    with pytest.raises(SpaceError) as e:
        loads_space(f"name: t\nengine: {{model: m}}\nmethods: {{suffix: {{{knob}: {value}}}}}\n")
    assert f"methods.suffix.{knob}" in str(e.value) and why in str(e.value)


def test_pre_flight_refuses_suffix_without_arctic_inference(monkeypatch):
    spec = {"method": "suffix", "num_speculative_tokens": 8}
    monkeypatch.setattr(_vllm, "suffix_trees_installed", lambda: False)
    why = VLLMServer.speculative_problem(spec)
    assert why is not None and why.startswith("methods.suffix: ")
    assert "arctic-inference==0.1.1" in why and "install_arctic_inference.sh" in why
    monkeypatch.setattr(_vllm, "suffix_trees_installed", lambda: True)
    assert VLLMServer.speculative_problem(spec) is None


def test_the_global_tree_is_off_unless_listed():
    """A job sends its prompts more than once: a global tree would draft the repeats from
    their own earlier responses, so the default measures per-request trees only."""
    space = loads_space("name: t\nengine: {model: m}\nmethods: {suffix: {}}\n")
    suffix = [c for c in grid_configs(space) if c["method"] == "suffix"]
    assert {c["max_cached_requests"] for c in suffix} == {0}
    assert [c["num_speculative_tokens"] for c in suffix] == list(range(1, 9))
    assert speculative_config(suffix[0], space)["suffix_decoding_max_cached_requests"] == 0
