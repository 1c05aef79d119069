"""The contract with vLLM: every speculative config SpecTune exports is one the installed
vLLM's own ``SpeculativeConfig`` takes. Every key must be one of its fields, and every value
must pass that field's type. A model-free method (no checkpoint to load, no target config to
read) must also pass the whole class, with its own cross-field checks, without a GPU.
Skipped where vLLM is not installed (``make test`` installs the CPU build)."""

from __future__ import annotations

import json

import pytest

from tuner.engines import VLLM_METHODS, speculative_json
from tuner.methods import METHODS

vllm_config = pytest.importorskip("vllm.config", reason="vLLM is not installed here")
pydantic = pytest.importorskip("pydantic")

LOOKUP = {"prompt_lookup_min": 2, "prompt_lookup_max": 3}
HEAD = {"head": "/models/head"}
PARAMS = {
    "ngram": LOOKUP,
    "ngram_gpu": LOOKUP,
    "draft_model": {"draft": "/models/draft", "draft_sample_method": "probabilistic"},
    "eagle": {**HEAD, "draft_sample_method": "greedy"},
    "eagle3": HEAD,
    "mtp": {},
    "suffix": {
        "max_tree_depth": 24,
        "max_cached_requests": 0,
        "max_spec_factor": 1.0,
        "min_token_prob": 0.1,
    },
    "medusa": HEAD,
    "mlp_speculator": HEAD,
    "dflash": HEAD,
    "dspark": HEAD,
}


def _exported(method: str) -> dict:
    params = {"num_speculative_tokens": 3, **PARAMS[method]}
    spec = METHODS[method].speculative_config(params, str)
    return json.loads(speculative_json(spec))  # what --speculative-config receives


def test_every_method_has_a_case():
    assert set(PARAMS) == set(METHODS) == set(VLLM_METHODS)


@pytest.mark.parametrize("method", sorted(PARAMS))
def test_every_exported_key_and_value_is_one_vllm_takes(method):
    fields = vllm_config.SpeculativeConfig.__pydantic_fields__
    spec = _exported(method)
    assert spec["method"] == VLLM_METHODS[method]
    for key, value in spec.items():
        assert key in fields, f"{method}: vLLM's SpeculativeConfig has no field {key!r}"
        pydantic.TypeAdapter(fields[key].annotation).validate_python(value)


@pytest.mark.parametrize("method", [m for m in sorted(PARAMS) if METHODS[m].model_free])
def test_a_model_free_config_passes_vllms_own_validation(method):
    got = vllm_config.SpeculativeConfig(**_exported(method))
    assert got.method == VLLM_METHODS[method] and got.num_speculative_tokens == 3


def test_the_contract_catches_what_vllm_refuses():
    """The check can fail: vLLM refuses a lookup window whose min exceeds its max, and a
    method name it does not know."""
    bad = {**_exported("ngram"), "prompt_lookup_min": 5}
    with pytest.raises(ValueError, match="prompt_lookup_min"):
        vllm_config.SpeculativeConfig(**bad)
    field = vllm_config.SpeculativeConfig.__pydantic_fields__["method"]
    with pytest.raises(pydantic.ValidationError):
        pydantic.TypeAdapter(field.annotation).validate_python("lookahead")
