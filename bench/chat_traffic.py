"""Your model and your traffic (issue 31's Done-when): a real job on the tiny pair whose
target is named by a Hugging Face hub id, resolved from a local Hugging Face cache with
``HF_HUB_OFFLINE=1``, measuring the same prompts twice: raw text to ``/v1/completions`` and
``format: chat`` through the tiny target's chat template, with a batch size that queues.

    .venv/bin/python bench/chat_traffic.py [--db URL] [--work-dir DIR] [--trials 6]

What it does:
- builds a Hugging Face cache of ``models/tiny`` under ``WORK/hf`` (``scripts/make_hf_cache.py``:
  the hub's own layout, ids ``spectune/tiny-target`` …), and sets ``HF_HUB_CACHE`` to it and
  ``HF_HUB_OFFLINE=1`` for the job and its engines;
- writes ``WORK/chat.jsonl`` (the built-in ``code_completion`` prompts, each one user message)
  and a space: n-gram k 1..4, workloads ``chat`` (that file, ``format: chat``, first: the
  baseline's token ids for offline pricing are the chat ones) and ``raw`` (the same prompts,
  raw), ``max_num_seqs: [2, 4]`` at ``concurrency: [1, 4]`` (a batch of 2 queues at 4);
- runs ``spectune run`` on it, then reads ``spectune trials --json``.

Prints one line per finding, then, last, one JSON object: per workload its endpoint and the
engine's prompt tokens a request; for the n-gram trials, offline against measured acceptance
on the chat workload; per batch size, the baseline's p99 TTFT and mean queue time at
concurrency 4.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.workloads import builtin_path, read_jsonl  # noqa: E402

SPACE = """\
name: chat-traffic
engine:
  model: spectune/tiny-target
  served_model_name: tiny-target
  max_model_len: 512
  device: cpu
  enforce_eager: true
  startup_timeout_s: 300
methods:
  ngram:
    num_speculative_tokens: {{min: 1, max: 4}}
    prompt_lookup_min: {{min: 1, max: 2}}
    prompt_lookup_max: {{min: 3, max: 4}}
max_num_seqs: [2, 4]
memory_fraction: [0.15]
concurrency: [1, 4]
objective_concurrency: 4
workloads:
  - {{name: chat, path: {chat}, format: chat, num_prompts: 12, max_tokens: 64,
     warmup_requests: 2}}
  - {{name: raw, builtin: code_completion, num_prompts: 12, max_tokens: 64, warmup_requests: 2}}
measurement: {{repeats: 3, max_relative_mad: 0.15, repeat_s: 5, confirm_top: 1, confirm_budget: 2}}
lossless: {{num_prompts: 6, max_tokens: 32}}
slo: {{p99_tpot_ms: 80}}
start_with:
  - {{method: ngram, num_speculative_tokens: 4, prompt_lookup_min: 1, prompt_lookup_max: 4}}
trials: {trials}
seed: 0
"""


def _cli(*args: str, env: dict[str, str]) -> str:
    cmd = [sys.executable, "-m", "tuner.cli", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", help="database URL (default: WORK/chat.db)")
    ap.add_argument("--work-dir", type=Path)
    ap.add_argument("--trials", type=int, default=6)
    args = ap.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="spectune-chat-"))
    work.mkdir(parents=True, exist_ok=True)
    db = args.db or f"sqlite:///{work / 'chat.db'}"
    hf = work / "hf"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_hf_cache.py"), "--cache", str(hf)],
        check=True,
    )
    prompts = read_jsonl(builtin_path("code_completion"))
    chat = work / "chat.jsonl"
    chat.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": p.prompt}]}) + "\n"
            for p in prompts
        )
    )
    space = work / "chat-traffic.yaml"
    space.write_text(SPACE.format(chat=chat.name, trials=args.trials))
    env = {**os.environ, "HF_HUB_CACHE": str(hf), "HF_HUB_OFFLINE": "1"}
    env.setdefault("VLLM_CACHE_ROOT", str(work / "vllm-cache"))
    t0 = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "run", str(space), "--db", db],
        env=env,
        cwd=work,
    )
    wall = time.monotonic() - t0
    jobs = json.loads(_cli("jobs", "--json", "--db", db, env=env))
    job = max(j["id"] for j in jobs)
    trials = json.loads(_cli("trials", str(job), "--json", "--db", db, env=env))
    out: dict = {"job": job, "exit_code": run.returncode, "wall_s": round(wall, 1)}
    out["workloads"] = {}
    for t in trials:
        for m in t.get("measurements") or []:
            w = out["workloads"].setdefault(
                m["workload"], {"endpoint": set(), "prompt_tokens": []}
            )
            w["endpoint"].add(m.get("endpoint"))
            if m.get("prompt_tokens_mean") is not None:
                w["prompt_tokens"].append(m["prompt_tokens_mean"])
    for name, w in out["workloads"].items():
        w["endpoint"] = sorted(str(e) for e in w["endpoint"])
        tok = w.pop("prompt_tokens")
        w["prompt_tokens_mean"] = round(sum(tok) / len(tok), 1) if tok else None
        print(f"{name}: endpoint {w['endpoint']}, {w['prompt_tokens_mean']} prompt tokens")
    out["ngram_offline_vs_measured"] = []
    for t in trials:
        p = t.get("params") or {}
        if p.get("method") != "ngram" or t.get("offline_acceptance_rate") is None:
            continue
        for m in t.get("measurements") or []:
            if m["workload"] != "chat" or m.get("acceptance_rate") is None:
                continue
            row = {
                "trial": t["number"],
                "k": p.get("num_speculative_tokens"),
                "concurrency": m["concurrency"],
                "offline": round(t["offline_acceptance_rate"], 4),
                "measured": round(m["acceptance_rate"], 4),
            }
            row["error"] = round(abs(row["offline"] - row["measured"]), 4)
            out["ngram_offline_vs_measured"].append(row)
            print(
                f"n-gram trial {row['trial']} k={row['k']} c={row['concurrency']}: offline "
                f"{row['offline']} measured {row['measured']} (error {row['error']})"
            )
    out["baselines_at_c4"] = {}
    for t in trials:
        p = t.get("params") or {}
        if p.get("method") != "none" or t.get("state") != "complete":
            continue
        for m in t.get("measurements") or []:
            if m["workload"] == "raw" and m["concurrency"] == 4:
                out["baselines_at_c4"][str(p["max_num_seqs"])] = {
                    "trial": t["number"],
                    "p99_ttft_ms": m.get("p99_ttft_ms"),
                    "mean_queue_ms": m.get("mean_queue_ms"),
                    "output_tok_per_s": m.get("output_tok_per_s"),
                }
    print(json.dumps(out, default=str))
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
