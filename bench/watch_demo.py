"""The watch's Done-when run: a real vLLM CPU server started from a job's exported command
line, driven with one workload and then another; in each window ``spectune watch --once
--json`` runs and /metrics is also read directly before and after it (no request runs
outside the window), so the watch's per-position acceptance can be checked against the
counter deltas. Optionally (``--restart``) a third window in which the server is restarted.

    PYTHONPATH=. .venv/bin/python bench/watch_demo.py --db sqlite:////tmp/watch-demo.db \
        --job 1 [--window 60] [--workloads code_completion chat] [--restart] \
        [--out bench/watch_demo.json]

Prints one JSON object per window and writes them all to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.engines import fetch_metrics_text, free_port, parse_server_snapshot  # noqa: E402
from tuner.loadgen import _Req, run_requests  # noqa: E402
from tuner.metrics import spec_delta  # noqa: E402
from tuner.workloads import builtin_path, read_jsonl  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def exported(db: str, job: int) -> tuple[dict[str, str], str, list[str], str]:
    """(environment, model, flags, the whole text) of ``spectune export --format vllm-cli``."""
    text = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "export", str(job), "--format", "vllm-cli"]
        + ["--db", db],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout.strip()
    words = shlex.split(text.splitlines()[-1])
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    assert words[:2] == ["vllm", "serve"], words[:3]
    return env, words[2], words[3:], text


class Server:
    """The exported command, as ``python -m vllm.entrypoints.openai.api_server``, in its own
    process group."""

    def __init__(self, env: dict[str, str], model: str, flags: list[str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        self.argv += ["--model", model, "--host", "127.0.0.1", "--port", str(self.port), *flags]
        self.env = {**os.environ, **env}
        self.env.setdefault("VLLM_CACHE_ROOT", "/tmp/vc24")
        self.env.setdefault("VLLM_TARGET_DEVICE", "cpu")
        self.env.setdefault("HF_HUB_OFFLINE", "1")
        self.log, self.proc = log, None

    def start(self) -> float:
        t0 = time.monotonic()
        with self.log.open("a") as f:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
            )
        while time.monotonic() - t0 < 300:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited {self.proc.returncode}: see {self.log}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except OSError:
                time.sleep(1)
        raise RuntimeError("vLLM did not start in 300 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def served_name(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
        return json.loads(r.read())["data"][0]["id"]


def drive(url: str, model: str, workload: str, seconds: float, conc: int) -> dict:
    """Closed-loop requests of ``workload`` for about ``seconds`` (``NAME:T``: sampled at
    temperature T, else greedy)."""
    name, _, temp = workload.partition(":")
    sampling = {"temperature": float(temp), "seed": 0} if temp else {"temperature": 0.0}
    prompts = read_jsonl(builtin_path(name))
    reqs = [_Req(p, p.max_tokens or 64, sampling) for p in prompts]
    t0, done, ok = time.monotonic(), 0, 0
    while time.monotonic() - t0 < seconds:
        got, _ = asyncio.run(run_requests(url, model, reqs[: max(conc, 4)], conc, 120))
        done += len(got)
        ok += sum(r.ok for r in got)
        reqs = reqs[max(conc, 4) :] + reqs[: max(conc, 4)]
    return {"requests": done, "ok": ok, "seconds": round(time.monotonic() - t0, 1)}


def window(srv: Server, db: str, job: int, workload: str, w: float, conc: int, restart=False):
    """One watch window with the direct reads around it."""
    model = served_name(srv.url)
    a = asyncio.run(fetch_metrics_text(srv.url))
    watch = subprocess.Popen(
        [sys.executable, "-m", "tuner.cli", "watch", "--url", srv.url, "--job", str(job)]
        + ["--once", "--json", "--interval", str(w), "--db", db],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)
    t0 = time.monotonic()
    load = {}
    if restart:
        load["before_restart"] = drive(srv.url, model, workload, 10, conc)
        srv.stop()
        load["restart_s"] = round(srv.start(), 1)
        load["after_restart"] = drive(srv.url, model, workload, 5, conc)
    else:
        load = drive(srv.url, model, workload, w - 12, conc)
    load["inside_window_s"] = round(time.monotonic() - t0, 1)
    out, err = watch.communicate(timeout=w + 120)
    b = asyncio.run(fetch_metrics_text(srv.url))
    sa, sb = parse_server_snapshot(a), parse_server_snapshot(b)
    try:
        direct = spec_delta(sa.spec, sb.spec)
        direct_doc = None if direct is None else direct.__dict__
    except ValueError as e:
        direct_doc = {"error": str(e)}
    return {
        "workload": workload,
        "concurrency": conc,
        "load": load,
        "watch_exit": watch.returncode,
        "watch": json.loads(out) if out.strip() else None,
        "watch_stderr": err.strip()[-500:],
        "direct_delta": direct_doc,
    }


def _pp(xs: list[float] | None) -> str:
    return " ".join(f"{x:.4f}" for x in xs) if xs else "-"


def markdown(doc: dict) -> str:
    """The windows as a note: watch against direct deltas, the verdicts, the predictions."""
    out = [
        "# spectune watch against a real vLLM CPU server (bench/watch_demo.py)",
        "",
        "Written by the script from its own run; nothing typed by hand. The server is the",
        "job's exported command line:",
        "",
        "```",
        doc["export"],
        "```",
        "",
        f"Server start: {doc.get('startup_s')} s. Per window: /metrics read directly before the",
        "watch starts and after it ends; requests run only inside the window.",
        "",
    ]
    for i, w in enumerate(doc["windows"], 1):
        r, d = w["watch"] or {}, w["direct_delta"] or {}
        out += [f"## Window {i}: {w['workload']} (concurrency {w['concurrency']})", ""]
        out += [f"- load: {json.dumps(w['load'])}; watch exit code {w['watch_exit']}"]
        out += [
            f"- drafts in the window: watch {r.get('num_drafts')}, direct {d.get('num_drafts')}"
        ]
        out += [f"- per-position acceptance, watch:  {_pp(r.get('per_position_acceptance'))}"]
        out += [f"- per-position acceptance, direct: {_pp(d.get('per_position_acceptance'))}"]
        if r.get("per_position_acceptance") and d.get("per_position_acceptance"):
            diff = max(
                abs(a - b)
                for a, b in zip(
                    r["per_position_acceptance"], d["per_position_acceptance"], strict=True
                )
            )
            out += [f"- largest difference: {diff:.2g} (the bar: 0.01)"]
        if "error" in d:
            out += [f"- direct deltas: {d['error']}"]
        out += [
            f"- acceptance rate {r.get('acceptance_rate')}, mean acceptance length "
            f"{r.get('mean_acceptance_length')}, live concurrency {r.get('live_concurrency')}",
            f"- **verdict: {r.get('verdict')}** ({r.get('reason')}); recommended depth "
            f"{r.get('recommended_depth')}; predicted speedup {r.get('predicted_speedup')}",
            f"- differs from the winner: {r.get('config_differences')}",
            "",
        ]
        if len(r.get("predictions") or []) > 1:
            out += [
                f"Predicted by job {r['job_id']}'s model (not measured):",
                "",
                "| k | tok/s | band | mean TPOT ms | speedup |",
                "|---|---|---|---|---|",
            ]
            out += [
                f"| {p['depth']} | {p['output_tok_per_s']:.1f} | {p['output_tok_per_s_low']:.1f}-"
                f"{p['output_tok_per_s_high']:.1f} | {p['mean_tpot_ms']:.2f} | "
                f"{p['speedup_vs_no_spec']:.2f}x |"
                for p in r["predictions"]
            ]
            out += [""]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--workloads", nargs="+", default=["code_completion", "chat"])
    ap.add_argument("--restart", action="store_true")
    ap.add_argument("--out", default=str(REPO / "bench" / "watch_demo.json"))
    ap.add_argument("--md", default=str(REPO / "bench" / "watch_demo.md"))
    args = ap.parse_args()
    env, model, flags, text = exported(args.db, args.job)
    srv = Server(env, model, flags, Path("/tmp/w24/demo-vllm.log"))
    doc = {"export": text, "windows": []}
    try:
        doc["startup_s"] = round(srv.start(), 1)
        drive(srv.url, served_name(srv.url), args.workloads[0], 5, args.concurrency)  # warm
        for wl in args.workloads:
            r = window(srv, args.db, args.job, wl, args.window, args.concurrency)
            print(json.dumps(r), flush=True)
            doc["windows"].append(r)
        if args.restart:
            r = window(srv, args.db, args.job, "chat", 150, args.concurrency, restart=True)
            print(json.dumps(r), flush=True)
            doc["windows"].append(r)
    finally:
        srv.stop()
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        Path(args.md).write_text(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
