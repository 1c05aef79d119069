"""A newcomer's walk through `make serve`, scripted, on the real engine (no fake anywhere).

Starts `spectune serve` (API + UI + embedded worker), then in Debian's chromium: picks the
tiny-cpu preset, sets a trial budget, submits, watches the job to the end, moves the SLO until
it splits the points, copies the winning --speculative-config and checks it equals the API's
export, and saves a screenshot. Prints what it saw, step by step, with timings.

    .venv/bin/python scripts/walkthrough_serve.py --trials 3 --out /tmp/walkthrough.png
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tuner.client import wait_until_up

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(t0: float, msg: str) -> None:
    print(f"[{time.monotonic() - t0:7.1f} s] {msg}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=3, help="trial budget typed into the form")
    ap.add_argument("--db", default=None, help="default: a fresh SQLite file under .spectune/")
    ap.add_argument("--out", type=Path, default=Path("/tmp/walkthrough-job-page.png"))
    ap.add_argument("--timeout-s", type=float, default=1800)
    ap.add_argument(
        "--job",
        type=int,
        help="skip submitting: walk through this finished job of --db (served without a worker)",
    )
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    port = _free_port()
    db = args.db or f"sqlite:///{REPO / '.spectune' / f'walkthrough-{int(time.time())}.db'}"
    (REPO / ".spectune").mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "tuner.cli", "serve", "--db", db, "--port", str(port)]
    if args.job is not None:
        cmd.append("--no-worker")
    t0 = time.monotonic()
    log = (REPO / ".spectune" / "walkthrough-serve.log").open("wb")
    proc = subprocess.Popen(cmd, start_new_session=True, cwd=REPO, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base + "/healthz", timeout_s=60, alive=lambda: proc.poll() is None)
        say(t0, f"spectune serve is up at {base} (database {db})")
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
            ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
            page = ctx.new_page()
            page.set_default_timeout(60_000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))

            if args.job is None:
                page.goto(base + "/")
                page.wait_for_selector("#preset option[value=tiny-cpu]", state="attached")
                page.select_option("#preset", "tiny-cpu")
                page.fill("#trials", str(args.trials))
                page.wait_for_selector(f"#submit:has-text('{args.trials} trials')")
                page.click("#submit")
                page.wait_for_url("**/#/jobs/*")
                job_id = int(page.url.rsplit("/", 1)[1])
                say(t0, f"submitted the tiny-cpu preset with {args.trials} trials: job {job_id}")
            else:
                job_id = args.job
                page.goto(f"{base}/#/jobs/{job_id}")
                page.wait_for_selector("[data-testid=job-state]")
            last = ""
            deadline = time.monotonic() + args.timeout_s
            while True:
                state = page.inner_text("[data-testid=job-state]")
                progress = page.inner_text("[data-testid=progress-text]")
                if progress != last:
                    say(t0, f"watching: {state} · {progress}")
                    last = progress
                if state in ("succeeded", "failed", "cancelled"):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("the job did not finish in time")
                time.sleep(5)
            if state != "succeeded":
                raise SystemExit(f"job ended {state}")
            rep = page.evaluate(f"fetch('/api/jobs/{job_id}/pareto').then(r => r.json())")
            n_sel = sum(q["concurrency"] == rep["concurrency"] for q in rep["points"])
            page.wait_for_function(
                "n => document.querySelectorAll('.pt.sel').length === n", arg=n_sel
            )
            say(
                t0,
                f"Pareto chart: {len(rep['points'])} points, {n_sel} at concurrency "
                f"{rep['concurrency']}; summary: "
                f"{page.inner_text('[data-testid=pareto-summary]')}",
            )

            def copy_winner(slo_ms: float | None) -> str:
                page.wait_for_selector("button.copy[data-format=vllm-json]:not([disabled])")
                page.click("button.copy[data-format=vllm-json]")
                page.wait_for_selector("button.copy[data-format=vllm-json]:has-text('Copied')")
                copied = page.evaluate("navigator.clipboard.readText()")
                q = f"&slo_p99_tpot_ms={slo_ms}" if slo_ms is not None else ""
                want = page.evaluate(
                    f"fetch('/api/jobs/{job_id}/export?format=vllm-json{q}')"
                    ".then(r => r.json()).then(j => j.text)"
                )
                if copied != want:
                    raise SystemExit(f"copied {copied!r} but the API exports {want!r}")
                json.loads(copied)
                return copied

            say(
                t0,
                f"copied the winning --speculative-config at the preset's SLO "
                f"({rep['slo']}): {copy_winner(None)}",
            )
            page.reload()
            page.wait_for_function(
                "n => document.querySelectorAll('.pt.sel').length === n", arg=n_sel
            )
            tpots = sorted(
                q["p99_tpot_ms"] for q in rep["points"] if q["concurrency"] == rep["concurrency"]
            )
            mid = (tpots[0] + tpots[-1]) / 2
            page.fill("#slo-tpot", f"{mid:.3f}")
            page.wait_for_function(
                "n => document.querySelectorAll('.pt.sel[data-feasible=true]').length < n",
                arg=n_sel,
            )
            feasible = page.locator(".pt.sel[data-feasible=true]").count()
            say(t0, f"moved the SLO to p99 TPOT {mid:.3f} ms: {feasible} of {n_sel} feasible")
            page.wait_for_selector("button.copy[data-format=vllm-json]:not(:has-text('Copied'))")
            say(t0, f"copied the winner under that SLO: {copy_winner(round(mid, 3))}")
            page.screenshot(path=str(args.out), full_page=True)
            say(t0, f"screenshot: {args.out}")
            if errors:
                raise SystemExit(f"page errors: {errors}")
            browser.close()
        return 0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
