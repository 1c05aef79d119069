"""TensorRT-LLM's form of a candidate: the YAML ``trtllm-serve MODEL --config F`` takes.

Export only: SpecTune does not launch TensorRT-LLM.
"""

from __future__ import annotations

from typing import Any

import yaml

from tuner.engines._base import ADAPTIVE_STEPS, EngineConfig, ExportUnsupported, adaptive_refused

__all__ = ["TRTLLM_DECODING", "trtllm_yaml"]

# vLLM method -> TensorRT-LLM speculative_config.decoding_type ("Eagle" there means EAGLE-3).
TRTLLM_DECODING = {
    "ngram": "NGram",
    "draft_model": "DraftTarget",
    "eagle3": "Eagle3",
    "mtp": "MTP",
}


def trtllm_yaml(cfg: EngineConfig) -> str:
    """The YAML TensorRT-LLM takes with ``--config`` (``trtllm-serve MODEL --config F``)."""
    spec = cfg.speculative_config
    doc: dict[str, Any] = {
        "max_batch_size": cfg.max_num_seqs,
        "max_seq_len": cfg.max_model_len,
        "kv_cache_config": {"free_gpu_memory_fraction": cfg.memory_fraction},
    }
    if spec is not None:
        method = spec["method"]
        if method not in TRTLLM_DECODING:
            raise ExportUnsupported(
                f"TensorRT-LLM has no decoding type for {method!r} (its Eagle is EAGLE-3; "
                "EAGLE-1 heads do not load there)"
            )
        if spec.get("draft_sample_method") not in (None, "greedy"):
            raise ExportUnsupported(
                "TensorRT-LLM's speculative config has no draft sampling option"
            )
        if ADAPTIVE_STEPS in spec:
            raise ExportUnsupported(adaptive_refused("TensorRT-LLM"))
        k = int(spec["num_speculative_tokens"])
        sc: dict[str, Any] = {"decoding_type": TRTLLM_DECODING[method], "max_draft_len": k}
        if method in ("draft_model", "eagle3"):
            sc["speculative_model"] = spec["model"]
        elif method == "ngram":
            sc["max_matching_ngram_size"] = int(spec.get("prompt_lookup_max") or k)
        elif method == "mtp":
            sc["num_nextn_predict_layers"] = k
        doc["speculative_config"] = sc
    return yaml.safe_dump(doc, sort_keys=False)
