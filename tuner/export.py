"""Export the winning configuration in the forms engines take."""

from __future__ import annotations

import json
from typing import Literal

import yaml

from tuner.engines import EngineConfig, export_cli, sglang_cli
from tuner.pareto import Point, Report, job_report

__all__ = ["FORMATS", "ExportError", "depth_schedule", "export_point", "export_job"]

FORMATS = ("vllm-json", "vllm-cli", "vllm-schedule-json", "sglang", "trtllm-yaml")
Format = Literal["vllm-json", "vllm-cli", "vllm-schedule-json", "sglang", "trtllm-yaml"]

# vLLM method -> TensorRT-LLM speculative_config.decoding_type ("Eagle" there means EAGLE-3).
TRTLLM_DECODING = {"ngram": "NGram", "draft_model": "DraftTarget", "eagle3": "Eagle3",
                   "mtp": "MTP"}  # fmt: skip


def trtllm_yaml(cfg: EngineConfig) -> str:
    """The YAML TensorRT-LLM takes with ``--config`` (``trtllm-serve MODEL --config F``)."""
    spec = cfg.speculative_config
    doc: dict = {"max_batch_size": cfg.max_num_seqs, "max_seq_len": cfg.max_model_len,
                 "kv_cache_config": {"free_gpu_memory_fraction": cfg.memory_fraction}}  # fmt: skip
    if spec is not None:
        method = spec["method"]
        if method not in TRTLLM_DECODING:
            raise ExportError(
                f"TensorRT-LLM has no decoding type for {method!r} (its Eagle is EAGLE-3; "
                "EAGLE-1 heads do not load there)"
            )
        k = int(spec["num_speculative_tokens"])
        sc: dict = {"decoding_type": TRTLLM_DECODING[method], "max_draft_len": k}
        if method in ("draft_model", "eagle3"):
            sc["speculative_model"] = spec["model"]
        elif method == "ngram":
            sc["max_matching_ngram_size"] = int(spec.get("prompt_lookup_max") or k)
        elif method == "mtp":
            sc["num_nextn_predict_layers"] = k
        doc["speculative_config"] = sc
    return yaml.safe_dump(doc, sort_keys=False)


_FAMILY_KEYS = ("draft", "head", "target", "prompt_lookup_min", "prompt_lookup_max",
                "max_num_seqs", "memory_fraction")  # fmt: skip


def depth_schedule(rep: Report) -> list[list[int]] | None:
    """vLLM's ``num_speculative_tokens_per_batch_size`` from the measurements: at each
    measured concurrency, the depth (among trials that differ from the winner only in depth)
    with the lowest time per output token, 0 where the baseline is faster; each level's
    depth holds from that level up to the next one. None when one depth is best everywhere
    (or the winner is the baseline)."""
    w = rep.winner
    if w is None or w.method == "none":
        return None
    family = {
        p.trial_number: int(p.params["num_speculative_tokens"])
        for p in rep.points
        if p.method == w.method and all(p.params.get(k) == w.params.get(k) for k in _FAMILY_KEYS)
    }
    levels = sorted(rep.baseline_by_conc)
    best: list[int] = []
    for c in levels:
        cands = [(v.spec_ms_per_token, k) for n, k in family.items()
                 for v in rep.verdicts.get(n, []) if v.concurrency == c]  # fmt: skip
        if not cands:
            return None
        ms, k = min(cands)
        base = rep.baseline_by_conc[c].get("mean_tpot_ms")
        best.append(0 if base is not None and ms >= base else k)
    if len(set(best)) <= 1 or max(best) == 0:
        return None
    top = int(w.params.get("max_num_seqs") or levels[-1])
    out = []
    for i, (c, k) in enumerate(zip(levels, best, strict=True)):
        start = 1 if i == 0 else c
        end = levels[i + 1] - 1 if i + 1 < len(levels) else max(top, c)
        out.append([start, end, k])
    return out


class ExportError(LookupError):
    pass


def export_point(p: Point, fmt: str, rep: Report | None = None) -> str:
    cfg = EngineConfig.from_dict(p.engine_config)
    if fmt == "vllm-schedule-json":
        sched = depth_schedule(rep) if rep is not None else None
        if sched is None or cfg.speculative_config is None:
            raise ExportError(
                "no depth schedule: the same depth is best at every concurrency measured "
                "(or speculation never pays); use vllm-json"
            )
        spec = dict(cfg.speculative_config)
        spec["num_speculative_tokens"] = max(k for _, _, k in sched)
        spec["num_speculative_tokens_per_batch_size"] = sched
        return json.dumps(spec, separators=(", ", ": "))
    if fmt == "vllm-json":
        # Only the object that goes after --speculative-config; null when the baseline wins.
        return json.dumps(cfg.speculative_config, separators=(", ", ": "))
    if fmt == "vllm-cli":
        return export_cli(cfg)
    if fmt == "sglang":
        try:
            return sglang_cli(cfg)
        except ValueError as e:
            raise ExportError(str(e)) from None
    if fmt == "trtllm-yaml":
        return trtllm_yaml(cfg)
    raise ExportError(f"format: unknown {fmt!r}; choose from {', '.join(FORMATS)}")


def export_job(url: str, job_id: int, fmt: str, **report_kw) -> str:
    if fmt not in FORMATS:
        raise ExportError(f"format: unknown {fmt!r}; choose from {', '.join(FORMATS)}")
    rep = job_report(url, job_id, **report_kw)
    if rep.replay_surface is not None:
        raise ExportError(
            f"job {job_id} replayed the recorded surface {rep.replay_surface} to benchmark the "
            "search; nothing was measured in it. Export from the job that recorded the surface."
        )
    if rep.winner is None:
        raise ExportError(
            f"job {job_id} has no feasible configuration at concurrency {rep.concurrency} "
            f"on workload {rep.workload} under SLO {rep.slo or 'none'}"
        )
    return export_point(rep.winner, fmt, rep)
