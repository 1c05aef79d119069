"""Screenshots of the web UI for the docs' Web UI page, from a job measured by a real engine.

    .venv/bin/python docs/screenshots.py --db sqlite:///spectune.db --job 1

Serves the database (no worker), photographs the jobs page, the job page, three trials
compared and the winner's trial page in Debian's chromium (``scripts/screenshots.py``'s
``shoot``), and writes them to ``docs/img/ui/`` with ``shots.json``, which names the job they
show; ``make docs`` then puts them on the page. It refuses a replayed job (nothing was
measured in it) and a job of the tests' FAKE engine (its numbers measure nothing), so the
page never shows either as a real engine's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "docs" / "img" / "ui"
CAPTIONS = {
    "ui-jobs.png": "The jobs page and the submit form",
    "job-page.png": "A job: Pareto chart, history, round-cost verdicts, exports, trials",
    "ui-compare.png": "Three trials compared",
    "ui-trial.png": "The winner's trial page",
}


def measured_by_an_engine(url: str, job: int) -> str:
    """What the job ran on, e.g. "vllm on cpu, model ...; SystemExit when it is no real
    engine's (a replay, or the FAKE engine whose presets all name themselves fake)."""
    from tuner.storage import Store

    store = Store(url)
    row = store.job(job)
    space = store.space(job, for_reading=True)
    engine = space.engine
    if engine.kind == "replay":
        raise SystemExit(f"job {job} replayed a recorded surface: no engine ran in it")
    if "fake" in f"{row.name} {engine.served_model_name or ''}".lower():
        raise SystemExit(f"job {job} ({row.name}) ran on the tests' FAKE engine")
    if row.state != "succeeded":
        raise SystemExit(f"job {job} is {row.state}; take screenshots of a finished job")
    return f"{engine.kind} on {engine.device}, model {engine.model}"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--db", required=True, help="a database with a job measured by an engine")
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--port", type=int, default=8767)
    args = ap.parse_args()
    what = measured_by_an_engine(args.db, args.job)

    spec = importlib.util.spec_from_file_location("shots", REPO / "scripts" / "screenshots.py")
    shots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shots)
    from tuner.api.settings import ServiceSettings

    with tempfile.TemporaryDirectory(prefix="spectune-docs-shots-") as tmp:
        settings = ServiceSettings(
            database_url=args.db,
            search_spaces_dir=REPO / "search_spaces",
            work_dir=Path(tmp),
            port=args.port,
            embedded_worker=False,
        )
        base, server = shots.serve(settings, None)
        try:
            args.out.mkdir(parents=True, exist_ok=True)
            files = shots.shoot(base, args.job, args.out, None)
        finally:
            server.should_exit = True
    manifest = {
        "job": f"job {args.job} ({what}), taken {datetime.now(UTC):%Y-%m-%d}",
        "shots": [{"file": f.name, "caption": CAPTIONS[f.name]} for f in files],
    }
    (args.out / "shots.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for f in files:
        print(f"wrote {f}")


if __name__ == "__main__":
    main()
