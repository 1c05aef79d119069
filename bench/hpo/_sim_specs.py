"""The two simulated surfaces' spaces and simulator settings, and the published numbers
each is checked against (bench/make_sim_surface.py writes them). SIMULATIONS, not
measurements: every number below is a model parameter calibrated to ``CITATIONS``."""

from __future__ import annotations

from typing import Any

from bench.hpo._sim_models import Linear, Roofline, Sim, Workload, decode_speedup

M = "../models/sim/"  # never launched: a simulated surface is only replayed


def _space(
    name: str,
    model: str,
    methods: dict,
    loads: tuple,
    levels: list,
    obj: int,
    wl: Workload,
    slo: float,
    mml: int,
) -> dict[str, Any]:
    return {
        "name": name,
        "engine": {
            "kind": "vllm",
            "model": M + model,
            "served_model_name": "target",
            "max_model_len": mml,
            "device": "cuda",
        },
        "methods": methods,
        "max_num_seqs": loads[0],
        "memory_fraction": loads[1],
        "concurrency": levels,
        "objective_concurrency": obj,
        "workload": {"builtin": wl.name, "num_prompts": 64, "max_tokens": wl.output_tokens},
        "measurement": {"repeats": 3, "confirm_top": 0},
        "slo": {"p99_tpot_ms": slo},
        "start_with": [{"method": "eagle3", "num_speculative_tokens": 3}],
        "trials": 40,
    }


def roofline_surface() -> tuple[Sim, dict, Workload]:
    wl = Workload("summarization", 1024, 256)
    heads = [M + "EAGLE3-LLaMA3.1-Instruct-8B", M + "Llama-3.1-8B-Instruct-speculator.eagle3"]
    drafts = [M + "Llama-3.2-1B-Instruct", M + "Llama-3.2-3B-Instruct"]
    space = _space(
        "sim-h100-llama8b-roofline",
        "Llama-3.1-8B-Instruct",
        {
            "ngram": {
                "num_speculative_tokens": {"min": 1, "max": 6},
                "prompt_lookup_min": {"min": 1, "max": 2},
                "prompt_lookup_max": {"min": 3, "max": 4},
            },
            "draft_model": {"num_speculative_tokens": {"min": 1, "max": 8}, "drafts": drafts},
            "eagle": {
                "num_speculative_tokens": {"min": 1, "max": 8},
                "heads": [M + "EAGLE-LLaMA3.1-Instruct-8B"],
            },
            "eagle3": {"num_speculative_tokens": {"min": 1, "max": 8}, "heads": heads},
        },
        ([64, 256], [0.3, 0.5, 0.9]),
        [1, 16, 64],
        16,
        wl,
        20.0,
        4096,
    )
    kv8 = 2 * 32 * 8 * 128 * 2  # layers x kv heads x head dim x K,V x bf16
    sim = Roofline(
        name="roofline",
        hbm_gb=80,
        max_model_len=4096,
        weights_gb=16.1,
        kv_bytes=kv8,
        base_startup_s=55.0,
        drafts={
            drafts[0]: dict(
                weights_gb=2.5,
                params=1.24e9,
                kv_bytes=2 * 16 * 8 * 64 * 2,
                overhead_ms=0.6,
                load_s=8,
            ),
            drafts[1]: dict(
                weights_gb=6.4,
                params=3.21e9,
                kv_bytes=2 * 28 * 8 * 128 * 2,
                overhead_ms=0.7,
                load_s=14,
            ),
            M + "EAGLE-LLaMA3.1-Instruct-8B": dict(
                weights_gb=1.5, params=0.75e9, kv_bytes=2 * 8 * 128 * 2, overhead_ms=0.35, load_s=4
            ),
            heads[0]: dict(
                weights_gb=0.8, params=0.4e9, kv_bytes=2 * 8 * 128 * 2, overhead_ms=0.3, load_s=4
            ),
            heads[1]: dict(
                weights_gb=0.8, params=0.4e9, kv_bytes=2 * 8 * 128 * 2, overhead_ms=0.3, load_s=4
            ),
        },
        geo={
            "ngram1": (0.62, 0.66),
            "ngram2": (0.55, 0.72),
            drafts[0]: (0.63, 0.63),
            drafts[1]: (0.71, 0.71),
            M + "EAGLE-LLaMA3.1-Instruct-8B": (0.62, 0.62),
            heads[0]: (0.74, 0.74),
            heads[1]: (0.70, 0.70),
        },
    )
    return sim, space, wl


def linear_surface() -> tuple[Sim, dict, Workload]:
    wl = Workload("chat", 256, 256)
    heads = [M + "GLM-4.5-Air-eagle3-sharegpt", M + "GLM-4.5-Air-eagle3-small"]
    space = _space(
        "sim-2xh100-glm45air-linear",
        "GLM-4.5-Air-FP8",
        {
            "ngram": {
                "num_speculative_tokens": {"min": 1, "max": 6},
                "prompt_lookup_min": {"min": 1, "max": 2},
                "prompt_lookup_max": {"min": 3, "max": 4},
            },
            "eagle3": {"num_speculative_tokens": {"min": 1, "max": 8}, "heads": heads},
            "mtp": {"num_speculative_tokens": {"min": 1, "max": 4}},
        },
        ([128, 256], [0.72, 0.8, 0.88, 0.95]),
        [1, 32, 128],
        32,
        wl,
        20.0,
        4096,
    )
    sim = Linear(
        name="linear",
        hbm_gb=80,
        max_model_len=4096,
        weights_gb=55.0,
        kv_bytes=94_000,
        base_startup_s=170.0,
        drafts={
            "mtp": dict(
                weights_gb=1.6, kv_bytes=2_000, a_ms=0.8, b_ms=0.004, prefill_frac=0.04, load_s=10
            ),
            heads[0]: dict(
                weights_gb=0.9, kv_bytes=2_000, a_ms=0.45, b_ms=0.002, prefill_frac=0.03, load_s=6
            ),
            heads[1]: dict(
                weights_gb=0.6, kv_bytes=2_000, a_ms=0.40, b_ms=0.002, prefill_frac=0.02, load_s=6
            ),
        },
        tables={
            "mtp": [0.87, 0.62, 0.38, 0.20],  # DeepSeek-V3 MTP: 85-90 % at position 1
            heads[0]: [0.74, 0.52, 0.36, 0.25, 0.17, 0.12, 0.08, 0.05],
            heads[1]: [0.58, 0.31, 0.16, 0.08, 0.04, 0.02, 0.01, 0.00],  # the vLLM table
            "ngram1": [0.30, 0.17, 0.10, 0.06, 0.04, 0.02],
            "ngram2": [0.22, 0.15, 0.10, 0.07, 0.05, 0.03],
        },
    )
    return sim, space, wl


def checks(sim: Sim, wl: Workload) -> list[tuple[str, float, float]]:
    """(what, published, simulated) for the numbers each model is calibrated to."""
    ctx = wl.prompt_tokens + wl.output_tokens / 2
    if isinstance(sim, Roofline):
        e3 = {
            "method": "eagle3",
            "head": M + "EAGLE3-LLaMA3.1-Instruct-8B",
            "num_speculative_tokens": 4,
            "max_num_seqs": 64,
            "memory_fraction": 0.9,
        }

        def best(b: int) -> float:
            """The best chain depth's decode speedup at batch ``b`` (prompt ~300 tokens)."""
            return max(
                decode_speedup(sim, {**e3, "num_speculative_tokens": k}, b, 300)
                for k in range(1, 9)
            )

        return [
            (
                "baseline tok/s, batch 1, H100, Llama-3.1-8B [eagle3]",
                158.34,
                1000 / sim.step_ms({**e3, "method": "none"}, 1, 300),
            ),
            ("EAGLE-3 speedup, batch 1 [eagle3: 373.25/158.34]", 373.25 / 158.34, best(1)),
            ("EAGLE-3 speedup, batch 64 [eagle3]", 1.38, best(64)),
            (
                "EAGLE-3 speedup batch 8 / batch 1 [gpustack_qwen3_8b: 1.6/2.7; their tree of 16 "
                "draft tokens vs our chain: not like for like]",
                1.6 / 2.7,
                best(8) / best(1),
            ),
        ]
    load = {"max_num_seqs": 128, "memory_fraction": 0.95}
    e3 = {"method": "eagle3", "head": M + "GLM-4.5-Air-eagle3-small", **load}
    mtp = {"method": "mtp", "num_speculative_tokens": 1, **load}
    out = [("MTP k=1 speedup, batch 1 [deepseek_v3]", 1.8, decode_speedup(sim, mtp, 1, ctx))]
    for k, pub in ((2, 1.19), (3, 1.21), (4, 1.25), (6, 1.15), (8, 1.04)):
        out.append(
            (
                f"EAGLE-3 k={k} speedup, batch 8, vLLM table [vllm_eagle3_gptoss]",
                pub,
                decode_speedup(sim, {**e3, "num_speculative_tokens": k}, 8, ctx),
            )
        )
    return out
