"""TESTS ONLY: ``spectune worker`` with the FAKE engine, for the fault tests.

The product's ``spectune worker`` has no way to take a test measurer (``measurers`` is a
constructor argument of ``Worker``, never a setting), so a fault test that needs a real
worker process runs this script: the same ``Worker.run_until_signal`` as ``spectune
worker``, with the FAKE OpenAI server (tests/fake_openai_server.py, slowed by
``--token-ms``) as its engine.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tests.helpers import fake_measurers
from tuner.storage import Store
from tuner.worker import Worker

REPO = Path(__file__).resolve().parents[2]
FAKE_SERVER = REPO / "tests" / "fake_openai_server.py"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--worker-id", required=True)
    ap.add_argument("--devices")
    ap.add_argument("--token-ms", type=float, default=25)
    ap.add_argument("--heartbeat-s", type=float, default=0.5)
    ap.add_argument("--stale-after-s", type=float, default=3.0)
    ap.add_argument("--engine", default=str(FAKE_SERVER), help="FAKE server script")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    launcher = [sys.executable, args.engine, "--fake-token-ms", str(args.token_ms)]
    w = Worker(
        Store(args.db),
        work_dir=Path(args.work_dir),
        worker_id=args.worker_id,
        poll_s=0.2,
        heartbeat_s=args.heartbeat_s,
        stale_after_s=args.stale_after_s,
        devices=args.devices,
        measurers=fake_measurers(launcher),
    )
    print(f"worker {w.worker_id} started", flush=True)
    return 130 if w.run_until_signal() else 0


if __name__ == "__main__":
    sys.exit(main())
