"""Screenshot a real job's page (Pareto chart, trials, export) for the docs.

    .venv/bin/python scripts/screenshot_job.py --db sqlite:///spectune.db --job 1 \
        --out docs/job-page.png
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tuner.client import wait_until_up

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", default="sqlite:///spectune.db")
    ap.add_argument("--job", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "job-page.png")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    cmd = [
        sys.executable,
        "-m",
        "tuner.cli",
        "serve",
        "--no-worker",
        "--db",
        args.db,
        "--port",
        str(args.port),
    ]
    proc = subprocess.Popen(cmd, start_new_session=True, cwd=REPO)
    base = f"http://127.0.0.1:{args.port}"
    try:
        wait_until_up(base + "/healthz", timeout_s=20, alive=lambda: proc.poll() is None)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{base}/#/jobs/{args.job}")
            page.wait_for_selector("[data-testid=pareto-point]")
            time.sleep(1.0)
            page.screenshot(path=str(args.out), full_page=True)
            browser.close()
        print(f"wrote {args.out}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


if __name__ == "__main__":
    main()
