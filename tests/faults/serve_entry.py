"""TESTS ONLY: ``spectune serve`` (API + embedded worker) with the FAKE engine, for the fault
tests: the same ``create_app`` under uvicorn as ``spectune serve``, with ``measurers`` (a test
argument of ``create_app``, never a setting) launching tests/fake_openai_server.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn

from tests.helpers import fake_measurers
from tuner.api import ServiceSettings, create_app

REPO = Path(__file__).resolve().parents[2]
FAKE_SERVER = REPO / "tests" / "fake_openai_server.py"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token-ms", type=float, default=25)
    args = ap.parse_args()
    settings = ServiceSettings(
        database_url=args.db,
        work_dir=Path(args.work_dir),
        port=args.port,
        worker_poll_s=0.2,
        worker_heartbeat_s=0.5,
        worker_stale_after_s=3.0,
    )
    launcher = [sys.executable, str(FAKE_SERVER), "--fake-token-ms", str(args.token_ms)]
    app = create_app(settings, run_worker=True, measurers=fake_measurers(launcher))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
