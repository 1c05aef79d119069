"""Screenshots of the web UI for the README (docs/ui-*.png), taken in Debian's chromium.

    .venv/bin/python scripts/screenshots.py                     # FAKE-engine demo, labelled
    .venv/bin/python scripts/screenshots.py --db sqlite:///spectune.db --job 1   # a real job

Without ``--db`` it makes a demo database in a temporary folder: one job run end to end by
the service's own worker against the FAKE OpenAI server of the tests (tests/fake_openai_server.py),
so every number in those pictures measures nothing. Each picture says so in a caption drawn on
the page before it is taken. ``--serve`` keeps the demo server up (Ctrl-C ends it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CHROMIUM = "/usr/bin/chromium"
FAKE_SERVER = REPO / "tests" / "fake_openai_server.py"

DEMO_SPACE = """\
# FAKE engine demo for screenshots: the numbers it produces measure nothing real.
name: fake-engine-demo
engine: {model: target, served_model_name: fake, startup_timeout_s: 30}
methods:
  ngram: {num_speculative_tokens: {min: 1, max: 4}, prompt_lookup_max: {min: 2, max: 4}}
  draft_model: {num_speculative_tokens: {min: 1, max: 4}, drafts: [draft]}
max_num_seqs: [4, 8]
concurrency: [1, 4]
workload: {num_prompts: 8, max_tokens: 24, warmup_requests: 1}
slo: {p99_tpot_ms: 1000}
measurement: {repeats: 2, max_relative_mad: 10, confirm_top: 1}
trials: 12
seed: 5
"""
CAPTION = (
    "DEMO DATA from the FAKE engine of the tests (scripts/screenshots.py): "
    "no number on this page was measured on a real engine."
)


def demo_root(root: Path, *, space: str = DEMO_SPACE) -> Path:
    """A search_spaces folder with the demo preset and the model folders pre-flight reads."""
    d = root / "search_spaces"
    for name in ("target", "draft"):
        (d / name).mkdir(parents=True, exist_ok=True)
        (d / name / "config.json").write_text(json.dumps({"vocab_size": 100}))
        (d / name / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    (d / "fake-demo.yaml").write_text(space)
    return d


def serve(settings, launcher: list[str] | None):
    """The real app under uvicorn in a thread; (base URL, server)."""
    import uvicorn

    from tests.helpers import fake_measurers
    from tuner.api import create_app

    app = create_app(settings, measurers=None if launcher is None else fake_measurers(launcher))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=settings.port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("the server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{settings.port}", server


def _json(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def run_demo_job(base: str, timeout_s: float = 600) -> int:
    job = _json(base + "/api/jobs", {"preset": "fake-demo"})
    deadline = time.monotonic() + timeout_s
    while (state := _json(f"{base}/api/jobs/{job['id']}")["state"]) not in (
        "succeeded",
        "failed",
        "cancelled",
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"demo job {job['id']} still {state} after {timeout_s:.0f} s")
        time.sleep(1)
    if state != "succeeded":
        raise SystemExit(f"demo job ended {state}")
    return job["id"]


def shoot(base: str, job: int, out: Path, caption: str | None) -> list[Path]:
    from playwright.sync_api import sync_playwright

    def label(page) -> None:
        if caption:
            page.evaluate(
                """c => { const p = document.createElement('p'); p.className = 'demo-caption';
                p.textContent = c; document.querySelector('main').prepend(p); }""",
                caption,
            )

    shots = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(f"{base}/#/")
        page.wait_for_selector(f"[data-job='{job}']")
        label(page)
        shots.append(out / "ui-jobs.png")
        page.screenshot(path=str(shots[-1]), full_page=True)

        page.goto(f"{base}/#/jobs/{job}")
        page.wait_for_selector("[data-testid=pareto-point]")
        page.wait_for_selector("[data-testid=history-point]")
        page.wait_for_selector("[data-testid=importance-sentence]")
        page.wait_for_selector("button.copy:not([disabled])")
        label(page)
        shots.append(out / "job-page.png")
        page.screenshot(path=str(shots[-1]), full_page=True)

        numbers = [
            int(n)
            for n in page.locator("[data-testid=trials-table] tbody tr").evaluate_all(
                "rs => rs.map(r => r.dataset.trial)"
            )
        ]
        page.goto(f"{base}/#/jobs/{job}/compare/{','.join(map(str, numbers[:3]))}")
        page.wait_for_selector("[data-testid=compare-table]")
        label(page)
        shots.append(out / "ui-compare.png")
        page.screenshot(path=str(shots[-1]), full_page=True)

        rep = page.evaluate(f"fetch('/api/jobs/{job}/pareto').then(r => r.json())")
        spec = rep["winner_trial"] if rep["winner_trial"] != rep["baseline_trial"] else numbers[-1]
        page.goto(f"{base}/#/jobs/{job}/trials/{spec}")
        page.wait_for_selector("h3:has-text('Latency distribution')")
        label(page)
        shots.append(out / "ui-trial.png")
        page.screenshot(path=str(shots[-1]), full_page=True)
        browser.close()
    return shots


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--db", help="a database with a real job (default: a FAKE-engine demo)")
    ap.add_argument("--job", type=int, default=1, help="with --db: the job to show")
    ap.add_argument("--out", type=Path, default=REPO / "docs")
    ap.add_argument("--port", type=int, default=8766)
    ap.add_argument("--serve", action="store_true", help="keep the server up afterwards")
    args = ap.parse_args()

    from tuner.api.settings import ServiceSettings

    with tempfile.TemporaryDirectory(prefix="spectune-shots-") as tmp:
        root = Path(tmp)
        demo = args.db is None
        settings = ServiceSettings(
            database_url=args.db or f"sqlite:///{root / 'demo.db'}",
            search_spaces_dir=demo_root(root) if demo else REPO / "search_spaces",
            work_dir=root / "work",
            port=args.port,
            embedded_worker=demo,
            worker_poll_s=0.2,
        )
        base, server = serve(settings, [sys.executable, str(FAKE_SERVER)] if demo else None)
        try:
            job = run_demo_job(base) if demo else args.job
            args.out.mkdir(parents=True, exist_ok=True)
            for s in shoot(base, job, args.out, CAPTION if demo else None):
                print(f"wrote {s}")
            if args.serve:
                print(f"serving {base}/#/jobs/{job} (Ctrl-C ends it)")
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            server.should_exit = True


if __name__ == "__main__":
    main()
