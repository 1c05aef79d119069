"""Measure the tiny target's trained heads through the real vLLM CPU engine, for the model card.

For each of the baseline, ``eagle`` (k), ``eagle3`` (k), ``medusa`` (k) and ``mtp`` (k=1,
served from the MiMo checkpoint ``target-mtp``, whose own baseline is measured too): greedy
acceptance, mean acceptance length, per-position acceptance, throughput, and whether greedy
text matches the tiny target's baseline (speculation must not change it beyond numerics; the
MiMo checkpoint carries the target's own weights, so its text must match as well).

    .venv/bin/python scripts/measure_heads.py [--models models/tiny] [--k 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from measure_pair import measure_config

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
        (
            f"medusa_k{k}",
            models / "target",
            {"method": "medusa", "model": str(models / "medusa"), "num_speculative_tokens": k},
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
    work = Path(tempfile.mkdtemp(prefix="spectune-heads-"))
    results: dict = {}
    texts: dict[str, list[str]] = {}
    for name, target, spec in runs(args.models, args.k):
        if args.only and name not in args.only and name != "baseline":
            continue
        results[name], texts[name] = measure_config(
            name, target, spec, work, max_tokens=args.max_tokens
        )
        n = len(texts[name])
        results[name]["greedy_text_match_vs_target_baseline"] = (
            sum(a == b for a, b in zip(texts["baseline"], texts[name], strict=True)) / n
        )
        own = "mtp_target_baseline" if target.name == "target-mtp" else "baseline"
        if own in texts:  # the MTP checkpoint is its own target: compare with its own baseline
            results[name]["greedy_text_match_vs_own_baseline"] = (
                sum(a == b for a, b in zip(texts[own], texts[name], strict=True)) / n
            )
        print(name, json.dumps(results[name]), flush=True)
    results["prompts"] = len(texts["baseline"])
    results["max_tokens"] = args.max_tokens
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
