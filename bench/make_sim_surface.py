"""Write SIMULATED GPU-scale surfaces (bench/surfaces/sim-*.jsonl) for the search benchmark.

    .venv/bin/python bench/make_sim_surface.py [--seed 0] [--out bench/surfaces]

Why: the only recorded surface (tiny-cpu, 42 configurations) is too small and too easy to
tell search strategies apart; a GPU grid of 300-500 configurations costs days of H100 time.
These files are SIMULATIONS in the recorded-surface format, for bench/search_efficiency.py
only: the header says ``"simulated": true``, names the generator, the cost model and the
published measurements it is calibrated to; no number in them was measured.

- ``sim-h100-llama8b-roofline``: Llama-3.1-8B on 1x H100, summarization; step cost from a
  roofline (bytes / bandwidth vs FLOPs / peak), geometric acceptance.
- ``sim-2xh100-glm45air-linear``: GLM-4.5-Air (FP8, TP 2) on 2x H100, chat; step cost from a
  fitted linear model, acceptance from per-position tables (MTP, EAGLE-3, n-gram).

Each configuration has three repeats per concurrency level (every repeat kept under
``runs`` with per-position acceptance, mean acceptance length, TPOT/ITL); repeat noise is
resampled from the relative spread of the recorded CPU repeats in tiny-cpu.jsonl. A
configuration whose KV cache cannot hold one max_model_len sequence fails to start
(``oom``); one that cannot hold the workload preempts (throughput and p99 TPOT suffer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hpo._sim_models import CITATIONS, Sim, Workload  # noqa: E402
from bench.hpo._sim_specs import checks, linear_surface, roofline_surface  # noqa: E402
from tuner.metrics import Measurement  # noqa: E402
from tuner.space import parse_space  # noqa: E402
from tuner.stats import aggregate, noise_score, relative_mad  # noqa: E402
from tuner.surface import FORMAT, grid_configs  # noqa: E402

HERE = Path(__file__).resolve().parent


def noise_pool(path: Path) -> tuple[list[float], list[float]]:
    """Relative deviations of each recorded repeat from its row's mean (throughput, p99)."""
    tok, p99 = [], []
    for line in path.read_text().splitlines()[1:]:
        r = json.loads(line)
        runs = (r.get("metrics") or {}).get("runs") or []
        if len(runs) < 2:
            continue
        mt = statistics.fmean(x["output_tok_per_s"] for x in runs)
        mp = statistics.fmean(x["p99_tpot_ms"] for x in runs)
        tok += [x["output_tok_per_s"] / mt - 1 for x in runs]
        p99 += [x["p99_tpot_ms"] / mp - 1 for x in runs]
    return tok, p99


def _run(
    sim: Sim,
    c: dict,
    wl: Workload,
    level: int,
    rng: np.random.Generator,
    pool: tuple[list[float], list[float]],
) -> Measurement:
    p = sim.point(c, wl, level)
    e_tok = 1 + pool[0][rng.integers(len(pool[0]))]
    e_lat = 1 + pool[1][rng.integers(len(pool[1]))]
    n_req = max(64, level)
    acc = [float(min(1.0, max(0.0, a * (1 + rng.normal(0, 0.01))))) for a in p["acceptance"]]
    tok_s = p["output_tok_per_s"] * e_tok
    dur = n_req * wl.output_tokens / tok_s
    lat = {k: v * e_lat for k, v in p.items() if k.endswith("_ms")}
    drafts = int(n_req * wl.output_tokens / p["tau"]) if acc else None
    return Measurement(
        workload=wl.name,
        concurrency=level,
        num_requests=n_req,
        num_ok=n_req,
        num_failed=0,
        duration_s=dur,
        output_tokens=n_req * wl.output_tokens,
        output_tok_per_s=tok_s,
        requests_per_s=n_req / dur,
        goodput_req_per_s=n_req / dur,
        **{
            k: lat.get(k)
            for k in (
                "mean_ttft_ms",
                "p50_ttft_ms",
                "p90_ttft_ms",
                "p99_ttft_ms",
                "mean_tpot_ms",
                "p50_tpot_ms",
                "p90_tpot_ms",
                "p99_tpot_ms",
                "mean_itl_ms",
                "p50_itl_ms",
                "p90_itl_ms",
                "p99_itl_ms",
                "mean_e2e_ms",
            )
        },
        p50_e2e_ms=lat["mean_e2e_ms"],
        p90_e2e_ms=lat["mean_e2e_ms"] * 1.2,
        p99_e2e_ms=lat["mean_e2e_ms"] * 1.5,
        acceptance_rate=sum(acc) / len(acc) if acc else None,
        mean_acceptance_length=1 + sum(acc) if acc else None,
        per_position_acceptance=acc,
        num_drafts=drafts,
        num_draft_tokens=drafts * len(acc) if drafts else None,
        num_accepted_tokens=int(drafts * sum(acc)) if drafts else None,
    )


def rows(sim: Sim, space: dict, wl: Workload, seed: int, pool: Any) -> list[dict[str, Any]]:
    sp = parse_space(space, base_dir=HERE / "surfaces")
    rng = np.random.default_rng(seed)
    out = []
    for c in grid_configs(sp):
        cap = sim.kv_tokens(c)
        if cap < sim.max_model_len:
            out.append(
                {
                    "config": c,
                    "state": "fail",
                    "fail_reason": "oom",
                    "fail_detail": f"SIMULATED: KV cache {cap:.0f} tokens < max_model_len "
                    f"{sim.max_model_len}",
                }
            )
            continue
        for level in space["concurrency"]:
            runs = [_run(sim, c, wl, level, rng, pool) for _ in range(3)]
            m = aggregate(runs)
            m["runs"] = [
                r.model_dump(
                    mode="json", exclude={"ttft_ms_values", "tpot_ms_values", "e2e_ms_values"}
                )
                for r in runs
            ]
            noise = max(relative_mad(m["stats"][o]) for o in ("output_tok_per_s", "p99_tpot_ms"))
            m.update(relative_mad=noise, noisy=noise > 0.15, arrival="closed", simulated=True)
            m["score"] = {
                "output_tok_per_s": noise_score(m["stats"]["output_tok_per_s"], "maximize"),
                "p99_tpot_ms": noise_score(m["stats"]["p99_tpot_ms"], "minimize"),
            }
            out.append(
                {
                    "config": c,
                    "state": "complete",
                    "workload": wl.name,
                    "concurrency": level,
                    "metrics": m,
                    "startup_s": round(sim.startup_s(c), 1),
                    "kv_cache_tokens": int(cap),
                    "peak_rss_mb": None,
                    "lossless_match_rate": 1.0,
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / "surfaces")
    ap.add_argument("--noise-from", type=Path, default=HERE / "surfaces" / "tiny-cpu.jsonl")
    args = ap.parse_args(argv)
    pool = noise_pool(args.noise_from)
    summary = {}
    for i, make in enumerate((roofline_surface, linear_surface)):
        sim, space, wl = make()
        rs = rows(sim, space, wl, args.seed + i, pool)
        header = {
            "format": FORMAT,
            "simulated": True,
            "space": space,
            "recorded": {
                "simulated": True,
                "engine": f"SIMULATED ({sim.name} model, no engine)",
            },
            "simulation": {
                "generator": "bench/make_sim_surface.py",
                "seed": args.seed + i,
                "model": sim.name,
                "doc": type(sim).__doc__,
                "noise": f"relative spread of the recorded repeats in {args.noise_from.name} "
                f"({len(pool[0])} repeats)",
                "citations": CITATIONS,
                "checks": [
                    {"what": w, "published": round(p, 3), "simulated": round(s, 3)}
                    for w, p, s in checks(sim, wl)
                ],
            },
        }
        path = args.out / f"sim-{space['name'].removeprefix('sim-')}.jsonl"
        with path.open("w") as f:
            f.write(json.dumps(header) + "\n")
            for r in rs:
                f.write(json.dumps(r) + "\n")
        n = len({json.dumps(r["config"], sort_keys=True) for r in rs})
        fails = sum(r["state"] == "fail" for r in rs)
        print(f"{path}: {n} configurations ({fails} fail to start), SIMULATED ({sim.name})")
        for w, p, s in checks(sim, wl):
            print(f"  check: {w}: published {p:.3f}, simulated {s:.3f} (ratio {s / p:.2f})")
        summary[space["name"]] = n
    print(json.dumps({"simulated_surfaces": summary, "seed": args.seed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
