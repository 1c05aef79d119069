"""Sampled traffic for real (issue 33's Done-when): two real jobs on the tiny pair with one
sampled workload (temperature 0.8, top-p 0.95), n-gram k=3 and a draft model k=3 after the
baseline: the first with SpecTune's CPU expand fix (its default), the second with
``SPECTUNE_VLLM_CPU_EXPAND_FIX=0`` (vLLM's CPU build as it ships).

    .venv/bin/python bench/sampled_traffic.py [--work-dir DIR] [--only fixed|unfixed]

For each job and speculative trial it prints the distribution check's p-value, the sampled
measurement's per-position acceptance, and the offline price (computed before the launch
from the baseline's own sampled outputs, four draws a prompt) against the acceptance the
engine counted, each with its standard error and the gap in standard errors; for the
unfixed job, whether the report names the defect. Last line: one JSON object.
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
SPACE = """\
name: sampled-traffic
engine:
  model: {repo}/models/tiny/target
  served_model_name: tiny-target
  max_model_len: 512
  device: cpu
  enforce_eager: true
  startup_timeout_s: 300
methods:
  ngram:
    num_speculative_tokens: {{min: 3, max: 3}}
    prompt_lookup_min: {{min: 1, max: 1}}
    prompt_lookup_max: {{min: 3, max: 3}}
  draft_model:
    num_speculative_tokens: {{min: 3, max: 3}}
    drafts: [{repo}/models/tiny/draft]
max_num_seqs: [4]
memory_fraction: [0.15]
concurrency: [1]
workloads:
  - name: sampled
    builtin: code_completion
    sampling: {{temperature: 0.8, top_p: 0.95}}
    num_prompts: 12
    max_tokens: 64
measurement: {{repeats: 3, max_relative_mad: 0.15, repeat_s: 5, confirm_top: 0, prune: false}}
lossless: {{num_prompts: 6, max_tokens: 32, sampled_prompts: 4, samples_per_prompt: 48,
           sampled_tokens: 16, alpha: 0.01}}
slo: {{p99_tpot_ms: 200}}
start_with:
  - {{method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 1, prompt_lookup_max: 3}}
  - {{method: draft_model, num_speculative_tokens: 3}}
trials: 3
seed: 0
"""
FIX_ENV = "SPECTUNE_VLLM_CPU_EXPAND_FIX"


def _cli(*args: str, env: dict[str, str]) -> str:
    cmd = [sys.executable, "-m", "tuner.cli", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout


def _job(work: Path, name: str, fixed: bool) -> dict:
    db = f"sqlite:///{work / (name + '.db')}"
    space = work / "sampled-traffic.yaml"
    space.write_text(SPACE.format(repo=REPO))
    env = {**os.environ, FIX_ENV: "1" if fixed else "0"}
    env.setdefault("VLLM_CACHE_ROOT", str(work / "vllm-cache"))
    t0 = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "run", str(space), "--db", db], env=env, cwd=work
    )
    wall = time.monotonic() - t0
    job = max(j["id"] for j in json.loads(_cli("jobs", "--json", "--db", db, env=env)))
    trials = json.loads(_cli("trials", str(job), "--json", "--db", db, env=env))
    report = _cli("report", str(job), "--db", db, env=env)
    flags = {
        p["trial_number"]: p.get("violations") or []
        for p in json.loads(_cli("report", str(job), "--json", "--db", db, env=env))["points"]
    }
    out: dict = {"exit_code": run.returncode, "wall_s": round(wall, 1), "trials": []}
    for t in trials:
        p = t.get("params") or {}
        if p.get("method") in (None, "none"):
            continue
        m = next((m for m in t.get("measurements") or [] if m["workload"] == "sampled"), {})
        row = {
            "trial": t["number"],
            "method": p["method"],
            "k": p.get("num_speculative_tokens"),
            "lossless_p_value": t.get("lossless_p_value"),
            "per_position_acceptance": m.get("per_position_acceptance"),
            "measured_acceptance_rate": m.get("acceptance_rate"),
            "measured_acceptance_rate_se": m.get("acceptance_rate_se"),
            "offline_acceptance_rate": t.get("offline_acceptance_rate"),
            "offline_acceptance_rate_se": t.get("offline_acceptance_rate_se"),
            "offline_per_position_acceptance": t.get("offline_per_position_acceptance"),
            "flagged": [v for v in flags.get(t["number"], []) if "distribution" in v],
        }
        if row["offline_acceptance_rate"] is not None and m.get("acceptance_rate") is not None:
            row["error"] = round(abs(row["offline_acceptance_rate"] - m["acceptance_rate"]), 4)
            ses = [row["offline_acceptance_rate_se"], row["measured_acceptance_rate_se"]]
            if all(x is not None for x in ses) and any(ses):
                # The error in standard errors of the difference: the 0.05 bound's footing.
                row["error_in_se"] = round(row["error"] / sum(x * x for x in ses) ** 0.5, 2)
        out["trials"].append(row)
        print(f"{name}: {json.dumps(row)}")
    out["report_names_the_defect"] = "expand_kernel" in report
    out["report_lines_on_the_defect"] = [ln for ln in report.splitlines() if "expand" in ln]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work-dir", type=Path)
    ap.add_argument("--only", choices=["fixed", "unfixed"])
    args = ap.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="spectune-sampled-"))
    work.mkdir(parents=True, exist_ok=True)
    out: dict = {"host_cpus": os.cpu_count()}
    for name, fixed in (("fixed", True), ("unfixed", False)):
        if args.only in (None, name):
            out[name] = _job(work, name, fixed)
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
