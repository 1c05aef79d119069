"""Fidelity of SpecTune's load generator against ``vllm bench serve``.

Both clients measure the same workload (the built-in prompts, the same output length, greedy,
``ignore_eos``) at the same concurrency against one running vLLM server, back to back in
alternating order, each from an empty prefix cache. A ratio is taken per pair of adjacent
runs (SpecTune / vllm bench), so drift of this machine between pairs cancels; the reported
ratio is the median over pairs, with the lowest and highest pair. Also prints SpecTune's own
client CPU time per streamed token. The last line is one JSON object with
``tok_per_s_ratio``, ``mean_tpot_ratio``, ``mean_ttft_ratio`` and
``client_cpu_us_per_token``.

``--isolate`` moves the engine's whole process tree to the last core and both clients to the
others (``taskset``), so neither client competes with vLLM's front end for a core: on a
2-core host without it, tokens reach a starved client in bursts and single runs differ by
20-40%.

``--noise-floor`` runs ``vllm bench serve`` in both columns: the spread of its ratios is what
this machine's drift alone gives, the resolution any client comparison here can have.

``--busy N`` keeps N cores busy with another process for the whole measurement (a pure
Python loop, ``while True: pass``), to show the clients agree on a loaded host too.

Starts (and stops) its own server on the tiny pair unless given ``--url``.

    .venv/bin/python bench/fidelity.py [--url URL --model NAME] [--concurrency 4] [--runs 5]

``vllm bench serve --dataset-name custom`` needs pandas: `make demo` / `make test` install it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.engines import EngineConfig, VLLMProbe, VLLMServer  # noqa: E402
from tuner.loadgen import measure  # noqa: E402
from tuner.workloads import builtin_path, read_jsonl  # noqa: E402


def _spectune_run(url: str, model: str, prompts: list, args: argparse.Namespace) -> dict:
    cpu0, t0 = time.process_time(), time.perf_counter()
    m = asyncio.run(
        measure(
            url,
            model,
            prompts,
            workload=args.workload,
            concurrency=args.concurrency,
            num_requests=args.num_prompts,
            max_tokens=args.output_len,
            warmup_requests=0,
            probe=VLLMProbe(),
        )
    )
    cpu = time.process_time() - cpu0
    return {
        "output_tok_per_s": m.output_tok_per_s,
        "mean_tpot_ms": m.mean_tpot_ms,
        "mean_ttft_ms": m.mean_ttft_ms,
        "failed": m.num_failed,
        "wall_s": time.perf_counter() - t0,
        "client_cpu_us_per_token": cpu / max(1, m.output_tokens) * 1e6,
    }


def _vllm_bench_run(
    url: str, model: str, tokenizer: str, dataset: Path, out: Path, args: argparse.Namespace
) -> dict:
    vllm = shutil.which("vllm", path=str(Path(sys.executable).parent)) or "vllm"
    cmd = [
        vllm,
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        url,
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--custom-output-len",
        str(args.output_len),
        "--num-prompts",
        str(args.num_prompts),
        "--max-concurrency",
        str(args.concurrency),
        "--ignore-eos",
        "--temperature",
        "0",
        "--request-rate",
        "inf",
        "--save-result",
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
        "--disable-tqdm",
    ]
    if args.skip_chat_template:
        cmd.append("--skip-chat-template")
    # Without VLLM_TARGET_DEVICE=cpu the CLI probes for kernels this CPU may lack.
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": os.environ.get("VLLM_TARGET_DEVICE", "cpu"),
        "HF_HUB_OFFLINE": "1",
    }
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({p.returncode}):\n{p.stderr[-3000:]}")
    r = json.loads(out.read_text())
    return {
        "output_tok_per_s": r["output_throughput"],
        "mean_tpot_ms": r["mean_tpot_ms"],
        "mean_ttft_ms": r["mean_ttft_ms"],
        "failed": r.get("num_prompts", args.num_prompts) - r.get("completed", args.num_prompts),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--url", help="a running vLLM server (default: start one on the tiny pair)")
    ap.add_argument("--model", default="tiny", help="served model name")
    ap.add_argument("--tokenizer", default=str(REPO / "models" / "tiny" / "target"))
    ap.add_argument("--workload", default="code_completion")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--num-prompts", type=int, help="requests per run (default: 24 x concurrency)")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--busy", type=int, default=0, help="cores to keep busy meanwhile")
    ap.add_argument("--isolate", action="store_true", help="engine and clients on own cores")
    ap.add_argument(
        "--noise-floor",
        action="store_true",
        help="vllm bench against itself: the ratios this machine gives with no client change",
    )
    ap.add_argument("--skip-chat-template", action="store_true", default=True)
    args = ap.parse_args()
    args.num_prompts = args.num_prompts or 24 * args.concurrency
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(args.busy)
    ]
    try:
        _compare(args)
    finally:
        for b in busy:
            b.kill()
            b.wait()


def _isolate(server: VLLMServer) -> None:
    """Every thread of the engine's processes on the last core; this process (and the
    ``vllm bench`` it starts) on the others."""
    last = os.cpu_count() - 1
    root = psutil.Process(server.proc.pid)
    for p in [root, *root.children(recursive=True)]:
        subprocess.run(
            ["taskset", "-a", "-p", "-c", str(last), str(p.pid)], check=True, capture_output=True
        )
    os.sched_setaffinity(0, set(range(last)))
    print(f"isolated: engine on core {last}, clients on cores 0-{last - 1}", flush=True)


def _compare(args: argparse.Namespace) -> None:

    prompts = read_jsonl(builtin_path(args.workload))
    work = Path(tempfile.mkdtemp(prefix="spectune-fidelity-"))
    dataset = work / "prompts.jsonl"
    # vllm bench's custom dataset takes the same prompts, in the same order, cycled alike.
    with dataset.open("w") as f:
        for i in range(args.num_prompts):
            f.write(json.dumps({"prompt": prompts[i % len(prompts)].prompt}) + "\n")
    server = None
    url = args.url
    if url is None:
        cfg = EngineConfig(
            model=str(REPO / "models" / "tiny" / "target"),
            served_model_name=args.model,
            max_model_len=512,
            max_num_seqs=max(8, args.concurrency),
            memory_fraction=0.15,
            enforce_eager=True,
        )
        server = VLLMServer(cfg, work / "engine.log", cache_root=work / "cache")
        server.start()
        url = server.base_url
        if args.isolate:
            _isolate(server)
        print(f"started vLLM on {url} in {server.startup_s:.0f} s", flush=True)
    try:
        # one unmeasured pass warms the engine for both clients
        _spectune_run(url, args.model, prompts, args)
        ours, theirs = [], []
        for i in range(args.runs):
            # Alternate who goes first, and start each run from an empty prefix cache, so
            # neither client inherits the other's warm state.
            out = work / f"bench-{i}.json"
            for who in ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours"):
                asyncio.run(VLLMProbe().reset_prefix_cache(url))
                if who == "ours" and args.noise_floor:
                    # The same client twice: what this machine's run-to-run drift alone gives.
                    ours.append(
                        _vllm_bench_run(url, args.model, args.tokenizer, dataset, out, args)
                        | {"client_cpu_us_per_token": 0.0}
                    )
                elif who == "ours":
                    ours.append(_spectune_run(url, args.model, prompts, args))
                else:
                    theirs.append(
                        _vllm_bench_run(url, args.model, args.tokenizer, dataset, out, args)
                    )
            print(
                f"run {i}: {'vllm bench (A)' if args.noise_floor else 'spectune'} "
                f"{ours[-1]['output_tok_per_s']:.1f} tok/s, "
                f"TPOT {ours[-1]['mean_tpot_ms']:.2f} ms | vllm bench "
                f"{theirs[-1]['output_tok_per_s']:.1f} tok/s, "
                f"TPOT {theirs[-1]['mean_tpot_ms']:.2f} ms",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()

    def med(rows: list[dict], k: str) -> float:
        return statistics.median(r[k] for r in rows)

    def paired(k: str) -> list[float]:
        return sorted(a[k] / b[k] for a, b in zip(ours, theirs, strict=True))

    res = {
        "tok_per_s_ratio": statistics.median(paired("output_tok_per_s")),
        "mean_tpot_ratio": statistics.median(paired("mean_tpot_ms")),
        "mean_ttft_ratio": statistics.median(paired("mean_ttft_ms")),
        "tok_per_s_ratio_range": [paired("output_tok_per_s")[0], paired("output_tok_per_s")[-1]],
        "mean_tpot_ratio_range": [paired("mean_tpot_ms")[0], paired("mean_tpot_ms")[-1]],
        "client_cpu_us_per_token": med(ours, "client_cpu_us_per_token"),
        "spectune_output_tok_per_s": med(ours, "output_tok_per_s"),
        "vllm_bench_output_tok_per_s": med(theirs, "output_tok_per_s"),
        "spectune_mean_tpot_ms": med(ours, "mean_tpot_ms"),
        "vllm_bench_mean_tpot_ms": med(theirs, "mean_tpot_ms"),
        "concurrency": args.concurrency,
        "num_prompts": args.num_prompts,
        "output_len": args.output_len,
        "runs": args.runs,
        "busy_cores": args.busy,
        "isolated": args.isolate,
        "noise_floor": args.noise_floor,
        "failed": sum(r["failed"] for r in ours + theirs),
    }
    print(
        f"medians: spectune {res['spectune_output_tok_per_s']:.1f} tok/s, TPOT "
        f"{res['spectune_mean_tpot_ms']:.2f} ms; vllm bench "
        f"{res['vllm_bench_output_tok_per_s']:.1f} tok/s, TPOT "
        f"{res['vllm_bench_mean_tpot_ms']:.2f} ms"
    )

    def rnd(v: object) -> object:
        if isinstance(v, float):
            return round(v, 4)
        return [rnd(x) for x in v] if isinstance(v, list) else v

    print(json.dumps({k: rnd(v) for k, v in res.items()}))


if __name__ == "__main__":
    main()
