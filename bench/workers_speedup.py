"""Does a second worker speed a job up? One job, one PostgreSQL, 1 worker against 2.

    .venv/bin/python bench/workers_speedup.py [--trials 12] [--runs 2] [--join-after 1]

FAKE ENGINE: the workers run the FAKE OpenAI server (tests/fake_openai_server.py, paced at
``--token-ms`` per token) through the fault tests' worker script, so what is measured is the
orchestration of many workers on one study (claim, join, shared budget, start points), not
an engine. Each run starts a fresh database on a private PostgreSQL cluster
(tests/pg_server.py), submits the same job, and times it from submission to ``succeeded``.
With ``--join-after N`` the second worker starts only after the first has N trials running
or done (a worker added mid-job). Also checks that no trial was lost or measured twice.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.faults.faultkit import start_worker, stop, submit, survivors, wait_for  # noqa: E402
from tests.pg_server import PgServer  # noqa: E402
from tuner.storage import Store  # noqa: E402


def _run(pg: PgServer, n_workers: int, args: argparse.Namespace, i: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"spectune-speedup-{n_workers}-{i}-"))
    url = pg.create_database(f"speedup_{n_workers}_{i}")
    Store(url).ensure_schema()
    job_id = submit(url, root, trials=args.trials, tokens=args.tokens)
    t0 = time.perf_counter()
    procs = [start_worker(url, root / "work", "A", token_ms=args.token_ms)]
    try:
        if n_workers == 2:
            wait_for(lambda: Store(url).job(job_id).trials_started >= args.join_after, 120, "A")
            procs.append(start_worker(url, root / "work", "B", token_ms=args.token_ms))
        wait_for(lambda: Store(url).job(job_id).state == "succeeded", 900, "the job to end")
        wall = time.perf_counter() - t0
    finally:
        for p in procs:
            stop(p)
    got = survivors(url, job_id)
    return {"wall_s": wall, "lost": got["lost"], "duplicated": got["duplicated"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--token-ms", type=int, default=25)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--join-after", type=int, default=1)
    args = ap.parse_args()
    pg = PgServer()
    pg.start()
    rows: dict[int, list[dict]] = {1: [], 2: []}
    try:
        for i in range(args.runs):
            for n in (1, 2) if i % 2 == 0 else (2, 1):
                r = _run(pg, n, args, i)
                rows[n].append(r)
                print(f"run {i}: {n} worker(s): {r['wall_s']:.1f} s", flush=True)
    finally:
        pg.destroy()
    one = statistics.median(r["wall_s"] for r in rows[1])
    two = statistics.median(r["wall_s"] for r in rows[2])
    print(
        json.dumps(
            {
                "engine": "FAKE",
                "trials": args.trials,
                "runs": args.runs,
                "join_after_trials": args.join_after,
                "one_worker_wall_s": round(one, 1),
                "two_workers_wall_s": round(two, 1),
                "speedup": round(one / two, 2),
                "lost": sum(r["lost"] for v in rows.values() for r in v),
                "duplicated": sum(r["duplicated"] for v in rows.values() for r in v),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
