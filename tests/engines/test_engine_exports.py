"""Every export format from a winner's engine configuration: vLLM's JSON and command line,
SGLang flags and TensorRT-LLM YAML.

Neither engine installs here (SGLang's kernels need CUDA; TensorRT-LLM needs CUDA and NVIDIA's
index), so their own parsers run only where they import: the tests below skip with that
reason otherwise, and check the mapping itself always.
"""

from __future__ import annotations

import importlib.util
import json
import shlex

import pytest
import yaml

from tuner.engines import (
    EXPORT_FORMAT_NAMES,
    EXPORT_FORMATS,
    METHOD_SPELLINGS,
    EngineConfig,
    ExportUnsupported,
    _vllm,
    export_cli,
    render_export,
    sglang_argv,
    sglang_cli,
    sglang_spec_flags,
    trtllm_yaml,
)


def _cfg(spec=None, **kw):
    return EngineConfig(
        model="/m/target",
        served_model_name="t",
        max_model_len=512,
        max_num_seqs=8,
        memory_fraction=0.85,
        speculative_config=spec,
        **kw,
    )


def _flags(argv: list[str]) -> dict[str, str]:
    return {argv[i]: argv[i + 1] for i in range(0, len(argv) - 1, 2)}


@pytest.mark.parametrize(
    ("spec", "algo", "steps", "draft_tokens"),
    [
        (
            {"method": "draft_model", "model": "/m/d", "num_speculative_tokens": 3},
            "STANDALONE",
            "3",
            "4",
        ),
        ({"method": "eagle", "model": "/m/e", "num_speculative_tokens": 2}, "EAGLE", "2", "3"),
        ({"method": "eagle3", "model": "/m/e3", "num_speculative_tokens": 5}, "EAGLE3", "5", "6"),
        ({"method": "mtp", "num_speculative_tokens": 1}, "NEXTN", "1", "2"),
    ],
)
def test_sglang_triple_is_consistent(spec, algo, steps, draft_tokens):
    f = _flags(sglang_spec_flags(spec))
    assert f["--speculative-algorithm"] == algo
    # Chain drafting: top-k 1 and draft tokens = steps + 1, always set together.
    assert f["--speculative-num-steps"] == steps and f["--speculative-eagle-topk"] == "1"
    assert f["--speculative-num-draft-tokens"] == draft_tokens
    assert ("--speculative-draft-model-path" in f) == ("model" in spec)


def test_sglang_ngram_and_the_engine_flags():
    spec = {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    f = _flags(sglang_argv(_cfg(spec)))
    assert f["--speculative-algorithm"] == "NGRAM"
    assert f["--speculative-num-draft-tokens"] == "4"
    assert f["--speculative-ngram-min-match-window-size"] == "2"
    assert f["--speculative-ngram-max-match-window-size"] == "4"
    assert f["--max-running-requests"] == "8" and f["--cuda-graph-max-bs"] == "8"
    assert f["--mem-fraction-static"] == "0.85" and f["--context-length"] == "512"
    line = sglang_cli(_cfg(spec))
    assert shlex.split(line)[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--speculative-algorithm" not in sglang_cli(_cfg(None))
    with pytest.raises(ExportUnsupported, match="no SGLang equivalent"):
        sglang_spec_flags({"method": "medusa", "num_speculative_tokens": 2})


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is None,
    reason="SGLang is not installed here (its kernels need CUDA)",
)
def test_sglang_own_parser_accepts_the_flags():  # pragma: no cover - GPU machines only
    import argparse

    from sglang.srt.server_args import ServerArgs

    ap = argparse.ArgumentParser()
    ServerArgs.add_cli_args(ap)
    spec = {"method": "draft_model", "model": "/m/d", "num_speculative_tokens": 3}
    ns = ap.parse_args(sglang_argv(_cfg(spec)))
    assert ns.speculative_algorithm == "STANDALONE" and ns.speculative_num_steps == 3


@pytest.mark.parametrize(
    ("spec", "decoding", "extra"),
    [
        (
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
            "NGram",
            {"max_matching_ngram_size": 4},
        ),
        (
            {"method": "draft_model", "model": "/m/d", "num_speculative_tokens": 2},
            "DraftTarget",
            {"speculative_model": "/m/d"},
        ),
        (
            {"method": "eagle3", "model": "/m/e3", "num_speculative_tokens": 4},
            "Eagle3",
            {"speculative_model": "/m/e3"},
        ),
        ({"method": "mtp", "num_speculative_tokens": 1}, "MTP", {"num_nextn_predict_layers": 1}),
    ],
)
def test_trtllm_yaml(spec, decoding, extra):
    doc = yaml.safe_load(trtllm_yaml(_cfg(spec)))
    sc = doc["speculative_config"]
    assert sc["decoding_type"] == decoding
    assert sc["max_draft_len"] == spec["num_speculative_tokens"]
    for k, v in extra.items():
        assert sc[k] == v
    assert doc["max_batch_size"] == 8 and doc["max_seq_len"] == 512
    assert doc["kv_cache_config"] == {"free_gpu_memory_fraction": 0.85}


def test_trtllm_refuses_eagle1_and_baseline_has_no_speculation():
    with pytest.raises(ExportUnsupported, match="no decoding type for 'eagle'"):
        trtllm_yaml(_cfg({"method": "eagle", "model": "/m/e", "num_speculative_tokens": 2}))
    assert "speculative_config" not in yaml.safe_load(trtllm_yaml(_cfg(None)))


SPEC = {"method": "draft_model", "model": "/m/d", "num_speculative_tokens": 3}


def test_one_list_of_export_formats():
    assert EXPORT_FORMAT_NAMES == (
        "vllm-json",
        "vllm-cli",
        "vllm-schedule-json",
        "sglang",
        "trtllm-yaml",
    )
    assert [f.engine for f in EXPORT_FORMATS] == ["vllm", "vllm", "vllm", "sglang", "trtllm"]
    assert EXPORT_FORMATS[0].label == "vLLM --speculative-config JSON"
    assert all(f.label and f.description for f in EXPORT_FORMATS)


def test_render_export_every_format():
    cfg = _cfg(SPEC)
    assert render_export("vllm-json", cfg) == (
        '{"method": "draft_model", "model": "/m/d", "num_speculative_tokens": 3}'
    )
    assert render_export("vllm-json", _cfg(None)) == "null"
    assert render_export("vllm-cli", cfg) == export_cli(cfg)
    assert render_export("sglang", cfg) == sglang_cli(cfg)
    assert render_export("trtllm-yaml", cfg) == trtllm_yaml(cfg)
    sched = [[1, 1, 3], [2, 8, 1]]
    assert json.loads(render_export("vllm-schedule-json", cfg, sched)) == {
        **SPEC,
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": sched,
    }
    assert render_export("vllm-schedule-json", cfg, sched).startswith('{"method": "draft_model"')
    for name in EXPORT_FORMAT_NAMES:
        assert render_export(name, cfg, sched)


def test_render_export_refusals():
    with pytest.raises(ExportUnsupported, match="no depth schedule"):
        render_export("vllm-schedule-json", _cfg(SPEC), None)
    with pytest.raises(ExportUnsupported, match="no depth schedule"):
        render_export("vllm-schedule-json", _cfg(None), [[1, 8, 2]])
    eagle = _cfg({"method": "eagle", "model": "/m/e", "num_speculative_tokens": 2})
    with pytest.raises(ExportUnsupported, match="TensorRT-LLM"):
        render_export("trtllm-yaml", eagle)
    with pytest.raises(ExportUnsupported, match="no SGLang equivalent"):
        render_export("sglang", _cfg({"method": "medusa", "num_speculative_tokens": 2}))
    with pytest.raises(ValueError, match="format: unknown 'nope'; choose from vllm-json"):
        render_export("nope", _cfg(SPEC))


def test_vllm_cli_line_is_unchanged(monkeypatch):
    monkeypatch.setattr(_vllm, "_iomp_library", lambda: "/venv/lib/libiomp5.so")
    cfg = _cfg(SPEC, enforce_eager=True, cpu_kvcache_gib=2)
    assert export_cli(cfg, base={"HOME": "/root", "OMP_NUM_THREADS": "2"}) == (
        "# LD_PRELOAD: a path on the measuring machine; elsewhere preload your own"
        " libiomp5.so (pip install intel-openmp)\n"
        "# SPECTUNE_VLLM_CPU_EXPAND_FIX=1: vLLM's CPU build samples draft positions with"
        " uninitialised temperature/top-p/top-k (sampled requests only); with spectune"
        " installed beside vLLM its plugin fixes that, and leaves a build without the"
        " defect alone\n"
        "LD_PRELOAD=/venv/lib/libiomp5.so OMP_NUM_THREADS=2 SPECTUNE_VLLM_CPU_EXPAND_FIX=1"
        " VLLM_CPU_KVCACHE_SPACE=2 VLLM_TARGET_DEVICE=cpu vllm serve /m/target --max-model-len 512"
        " --max-num-seqs 8 --gpu-memory-utilization 0.85 --enforce-eager --speculative-config"
        """ '{"method":"draft_model","model":"/m/d","num_speculative_tokens":3}'"""
    )
    # On a GPU nothing is preloaded and no path needs a note: one line.
    assert export_cli(_cfg(SPEC, device="cuda"), base={}).startswith("vllm serve /m/target ")


def test_each_engine_spells_every_method_it_supports():
    vllm_only = {"suffix", "medusa", "mlp_speculator", "ngram_gpu", "dflash", "dspark"}
    methods = {"ngram", "draft_model", "eagle", "eagle3", "mtp", *vllm_only}
    assert set(METHOD_SPELLINGS["vllm"]) == methods
    assert all(k == v for k, v in METHOD_SPELLINGS["vllm"].items())
    # Suffix decoding (Arctic Inference), Medusa and MLP speculators, vLLM's GPU n-gram
    # lookup, DFlash and DSpark are not exported to SGLang or TensorRT-LLM (TRT-LLM's Medusa
    # needs a choices tree SpecTune does not search; SGLang's DFLASH is not mapped yet).
    assert set(METHOD_SPELLINGS["sglang"]) == methods - vllm_only
    assert set(METHOD_SPELLINGS["trtllm"]) == methods - {"eagle", *vllm_only}  # nor EAGLE-1
