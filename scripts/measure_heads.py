"""Measure the tiny target's trained heads through the real vLLM CPU engine, for the model card.

For each of the baseline, ``eagle`` (k), ``eagle3`` (k) and ``mtp`` (k=1, served from the
MiMo checkpoint ``target-mtp``, whose own baseline is measured too): greedy acceptance, mean
acceptance length, per-position acceptance, throughput, and whether greedy text matches the
tiny target's baseline (speculation must not change it beyond numerics; the MiMo checkpoint
carries the target's own weights, so its text must match as well).

    .venv/bin/python scripts/measure_heads.py [--models models/tiny] [--k 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from measure_pair import _greedy_texts

from tuner.engines import EngineConfig, VLLMServer
from tuner.loadgen import measure
from tuner.workloads import builtin_path, read_jsonl

REPO = Path(__file__).resolve().parents[1]


def runs(models: Path, k: int) -> list[tuple[str, Path, dict | None]]:
    return [
        ("baseline", models / "target", None),
        (
            f"eagle_k{k}",
            models / "target",
            {"method": "eagle", "model": str(models / "eagle"), "num_speculative_tokens": k},
        ),
        (
            f"eagle3_k{k}",
            models / "target",
            {"method": "eagle3", "model": str(models / "eagle3"), "num_speculative_tokens": k},
        ),
        ("mtp_target_baseline", models / "target-mtp", None),
        ("mtp_k1", models / "target-mtp", {"method": "mtp", "num_speculative_tokens": 1}),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", type=Path, default=REPO / "models" / "tiny")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--only", action="append", help="run names to measure (default: all)")
    args = ap.parse_args()
    prompts = read_jsonl(builtin_path("code_completion"))
    work = Path(tempfile.mkdtemp(prefix="spectune-heads-"))
    results: dict = {}
    texts: dict[str, list[str]] = {}
    for name, target, spec in runs(args.models, args.k):
        if args.only and name not in args.only and name != "baseline":
            continue
        cfg = EngineConfig(
            model=str(target),
            served_model_name="tiny",
            max_model_len=512,
            max_num_seqs=4,
            memory_fraction=0.1,
            speculative_config=spec,
            enforce_eager=True,
        )
        with VLLMServer(cfg, work / f"{name}.log", cache_root=work / "cache") as srv:
            m = asyncio.run(
                measure(
                    srv.base_url,
                    "tiny",
                    prompts,
                    workload="code_completion",
                    concurrency=1,
                    num_requests=len(prompts),
                    max_tokens=args.max_tokens,
                    warmup_requests=2,
                )
            )
            texts[name] = asyncio.run(
                _greedy_texts(srv.base_url, [p.prompt for p in prompts], args.max_tokens)
            )
        tok_s = m.output_tok_per_s
        results[name] = {
            "startup_s": round(srv.startup_s or 0, 1),
            "output_tok_per_s": round(tok_s, 1),
            "ms_per_output_token": round(1000 / tok_s, 2) if tok_s else None,
            "p50_tpot_ms": round(m.p50_tpot_ms or 0, 2),
            "acceptance_rate": m.acceptance_rate,
            "mean_acceptance_length": m.mean_acceptance_length,
            "per_position_acceptance": m.per_position_acceptance,
            "num_failed": m.num_failed,
            "greedy_text_match_vs_target_baseline": sum(
                a == b for a, b in zip(texts["baseline"], texts[name], strict=True)
            )
            / len(prompts),
        }
        own = "mtp_target_baseline" if target.name == "target-mtp" else "baseline"
        if own in texts:  # the MTP checkpoint is its own target: compare with its own baseline
            results[name]["greedy_text_match_vs_own_baseline"] = sum(
                a == b for a, b in zip(texts[own], texts[name], strict=True)
            ) / len(prompts)
        print(name, json.dumps(results[name]), flush=True)
    results["prompts"] = len(prompts)
    results["max_tokens"] = args.max_tokens
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
