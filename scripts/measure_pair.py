"""Measure the tiny pair for its model card: greedy acceptance of draft_model (k=3) on the
demo workload, through the real vLLM CPU engine, plus the baseline for comparison and a
greedy-output match check (speculation must not change greedy text beyond numerics).

    .venv/bin/python scripts/measure_pair.py [--k 3] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

import aiohttp

from tuner.engines import EngineConfig, VLLMServer
from tuner.loadgen import measure
from tuner.workloads import builtin_path, read_jsonl

REPO = Path(__file__).resolve().parents[1]


async def _greedy_texts(url: str, prompts: list[str], max_tokens: int) -> list[str]:
    out = []
    async with aiohttp.ClientSession() as s:
        for p in prompts:
            body = {"model": "tiny", "prompt": p, "max_tokens": max_tokens, "temperature": 0}
            async with s.post(url + "/v1/completions", json=body) as r:
                out.append((await r.json())["choices"][0]["text"])
    return out


def measure_config(
    name: str,
    target: Path,
    spec: dict | None,
    work: Path,
    *,
    concurrency: int = 1,
    max_tokens: int = 96,
) -> tuple[dict, list[str]]:
    """One launch: the workload's prompts at one concurrency, then greedy texts for the
    lossless comparison. Returns the model-card numbers and the texts."""
    prompts = read_jsonl(builtin_path("code_completion"))
    cfg = EngineConfig(
        model=str(target),
        served_model_name="tiny",
        max_model_len=512,
        max_num_seqs=max(4, concurrency),
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
                concurrency=concurrency,
                num_requests=len(prompts),
                max_tokens=max_tokens,
                warmup_requests=2,
                probe=srv.probe,
            )
        )
        texts = asyncio.run(_greedy_texts(srv.base_url, [p.prompt for p in prompts], max_tokens))
    tok_s = m.output_tok_per_s
    return {
        "startup_s": round(srv.startup_s or 0, 1),
        "output_tok_per_s": round(tok_s, 1),
        "ms_per_output_token": round(1000 / tok_s, 2) if tok_s else None,
        "p50_tpot_ms": round(m.p50_tpot_ms or 0, 2),
        "p99_tpot_ms": round(m.p99_tpot_ms or 0, 2),
        "acceptance_rate": m.acceptance_rate,
        "mean_acceptance_length": m.mean_acceptance_length,
        "per_position_acceptance": m.per_position_acceptance,
        "num_failed": m.num_failed,
    }, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", type=Path, default=REPO / "models" / "tiny")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spectune-measure-"))
    results = {}
    texts = {}
    draft = f"draft_model_k{args.k}"
    for name, spec in (
        ("baseline", None),
        (
            draft,
            {
                "method": "draft_model",
                "model": str(args.models / "draft"),
                "num_speculative_tokens": args.k,
            },
        ),
    ):
        results[name], texts[name] = measure_config(
            name,
            args.models / "target",
            spec,
            work,
            concurrency=args.concurrency,
            max_tokens=args.max_tokens,
        )
    a, b = texts["baseline"], texts[draft]
    results["greedy_text_match"] = sum(x == y for x, y in zip(a, b, strict=True)) / len(a)
    results["prompts"] = len(a)
    results["concurrency"] = args.concurrency
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
