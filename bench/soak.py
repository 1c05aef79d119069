"""A soak under faults: a stream of jobs through the REST API while workers are killed and
stalled, PostgreSQL and the API server are restarted and the log folder's disk fills.

    .venv/bin/python bench/soak.py --minutes 8 --workers 3 --seed 1 --json

REPLAYED SURFACES, no engine: jobs answer from bench/surfaces/tiny-cpu.jsonl (``engine.kind:
replay``), so a trial takes a fraction of a second and many jobs run in minutes. What is under
test is everything around an engine: ``spectune serve --no-worker`` and N ``spectune worker``
processes, each in its own process group, sharing one durable private PostgreSQL
(tests/pg_server.py with fsync on) and one work folder whose ``logs`` is a small tmpfs.

Clients: one submits jobs of mixed seeds and sizes, each with an Idempotency-Key and resent
with it until answered (a lost answer must not make a second job); every fifth is sent twice
on purpose, every eighth is cancelled mid-way; another tries a watch on an address outside
the allow-list (it must be refused). Two poll jobs, trials, Pareto, logs and ``/metrics``.
Faults, one every ``--fault-every`` seconds, drawn with ``--seed``: ``kill -9`` of a worker
(restarted after 2-8 s), SIGSTOP of a worker for longer than the stale-after time, then
SIGCONT; PostgreSQL restarted (fast, immediate); the API server restarted; the log disk filled
for 15 s. After ``--minutes`` the faults stop, every process is brought back, and the soak
waits for every job to end, then stops everything and checks (bench/_soak_checks.py).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._soak_checks import check_jobs, orphan_engines  # noqa: E402
from bench._soak_clients import Clients  # noqa: E402
from bench._soak_procs import Proc, SmallDisk, durable_pg, rss_kib  # noqa: E402
from bench._soak_real import real_engine_phase  # noqa: E402
from tests.helpers import TINY_SURFACE  # noqa: E402
from tuner.states import JOB_ENDED  # noqa: E402
from tuner.storage import Store  # noqa: E402

HEARTBEAT_S, STALE_AFTER_S = 1.0, 6.0
FAULTS = {"kill": 3, "stall": 2, "db_fast": 1, "db_immediate": 1, "api": 1, "disk": 1}
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Soak(Clients):
    """The processes, the fault loop and the drain; the clients are ``Clients``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.rng = args, random.Random(args.seed)
        self.root = Path(tempfile.mkdtemp(prefix="spectune-soak-"))
        self.work = self.root / "work"
        self.disk = SmallDisk(self.work / "logs")
        self.pg = durable_pg()
        self.url = self.pg.create_database("soak")
        Store(self.url).ensure_schema()
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "SPECTUNE_DATABASE_URL": self.url,
            "SPECTUNE_PATH_ROOTS": str(TINY_SURFACE.parent),
            "SPECTUNE_WORKER_HEARTBEAT_S": str(HEARTBEAT_S),
            "SPECTUNE_WORKER_STALE_AFTER_S": str(STALE_AFTER_S),
            "SPECTUNE_WORKER_POLL_S": "0.5",
            "SPECTUNE_RATE_LIMIT_PER_S": "0",
        }
        cli = str(BIN / "spectune")
        common = ["--db", self.url, "--work-dir", str(self.work)]
        self.api = Proc(
            "api",
            [cli, "serve", "--no-worker", "--port", str(self.port), *common],
            self.root / "api.log",
            env,
        )
        self.workers = [
            Proc(f"w{i}", [cli, "worker", *common], self.root / f"w{i}.log", env)
            for i in range(args.workers)
        ]
        self.lock = threading.Lock()
        self.jobs: set[int] = set()
        self.count: Counter[str] = Counter()
        self.errors: list[str] = []
        self.rss: dict[int, list[tuple[float, int]]] = {}  # API pid -> (t, KiB)
        self.soaking = threading.Event()
        self.soaking.set()
        self.done = threading.Event()
        self.db_down_s: list[float] = []  # how long each restart kept the database away
        self.pending: list[tuple[float, Proc, str]] = []  # (when, process, "start"|"cont")

    # ------------------------------------------------------------------ faults
    def _later(self, delay_s: float, proc: Proc, action: str) -> None:
        self.pending.append((time.monotonic() + delay_s, proc, action))

    def _due(self) -> None:
        now = time.monotonic()
        for item in [p for p in self.pending if p[0] <= now]:
            self.pending.remove(item)
            _, proc, action = item
            if action == "cont":
                proc.signal(signal.SIGCONT)
            elif not proc.alive():
                proc.start()

    def fault(self, kind: str) -> None:
        rng = self.rng
        if kind in ("kill", "stall"):
            busy = {p for _, p, _ in self.pending}
            live = [w for w in self.workers if w.alive() and w not in busy]
            if not live:
                return
            w = rng.choice(live)
            if kind == "kill":
                w.signal(signal.SIGKILL)
                w.popen.wait()  # type: ignore[union-attr]
                self._later(rng.uniform(2, 8), w, "start")
                self.count["worker_kills"] += 1
            else:
                w.signal(signal.SIGSTOP)
                self._later(STALE_AFTER_S + rng.uniform(2, 6), w, "cont")
                self.count["worker_stalls"] += 1
        elif kind in ("db_fast", "db_immediate"):
            t = time.monotonic()
            self.pg.restart(mode=kind.removeprefix("db_"))
            self.db_down_s.append(round(time.monotonic() - t, 2))
            self.count["db_restarts"] += 1
            self.count[kind] += 1
        elif kind == "api":
            self.api.stop(timeout_s=30)
            self.api.start()
            self.count["api_restarts"] += 1
        elif kind == "disk" and self.disk.problem is None:
            written = self.disk.fill()
            self.count["disk_fills"] += 1
            self.count["disk_fill_bytes"] += written
            threading.Timer(15, self.disk.drain).start()

    def sample_rss(self) -> None:
        pid = self.api.pid
        if pid is not None and (kib := rss_kib(pid)) is not None:
            self.rss.setdefault(pid, []).append((time.monotonic(), kib))

    def rss_growth_mb(self) -> float:
        """Largest growth within one API process's life, from its first sample at least 30 s
        in (start-up allocations are not growth) to its last."""
        growth = 0.0
        for samples in self.rss.values():
            settled = [s for s in samples if s[0] >= samples[0][0] + 30]
            if len(settled) >= 2:
                growth = max(growth, (settled[-1][1] - settled[0][1]) / 1024)
        return round(growth, 1)

    # ------------------------------------------------------------------ the run
    def wait_api(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + "/healthz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the API did not answer in {timeout_s:.0f} s; see {self.api.log}")

    def run(self) -> dict[str, Any]:
        """The soak, then its checks; every process and the cluster go, whatever happens."""
        try:
            return self._soak()
        finally:
            self.done.set()
            self.soaking.clear()
            for p in (*self.workers, self.api):
                p.stop(timeout_s=30)
            self.disk.close()
            if self.args.keep_db:
                self.pg.stop()
                print(f"soak: database kept in {self.pg.data_dir}", file=sys.stderr)
            else:
                self.pg.destroy()

    def _soak(self) -> dict[str, Any]:
        args, t0 = self.args, time.monotonic()
        self.api.start()
        self.wait_api()
        for w in self.workers:
            w.start()
        threads = [threading.Thread(target=self.submitter, daemon=True)]
        threads += [
            threading.Thread(target=self.poller, args=(args.seed + 10 + i,), daemon=True)
            for i in range(2)
        ]
        for t in threads:
            t.start()
        next_fault = time.monotonic() + args.fault_every
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(0.5)
            self._due()
            self.sample_rss()
            if time.monotonic() >= next_fault:
                kind = self.rng.choices(list(FAULTS), weights=list(FAULTS.values()))[0]
                self.fault(kind)
                next_fault = time.monotonic() + self.rng.uniform(0.5, 1.5) * args.fault_every
        self.soaking.clear()
        threads[0].join(timeout=120)
        return self.drain(t0)

    def drain(self, t0: float) -> dict[str, Any]:
        """Faults off, everything back, every job to its end; then stop and check."""
        for _, proc, action in self.pending:
            proc.signal(signal.SIGCONT) if action == "cont" else (proc.alive() or proc.start())
        self.pending.clear()
        self.disk.drain()
        if not self.pg.running:
            self.pg.start()
        if not self.api.alive():
            self.api.start()
        store, deadline = Store(self.url), time.monotonic() + self.args.drain_minutes * 60
        while time.monotonic() < deadline:
            self.sample_rss()
            with self.lock:
                ids = set(self.jobs)
            if all(store.job(j).state in JOB_ENDED for j in ids):
                break
            time.sleep(2)
        real: dict[str, Any] = {}
        if self.args.real_engine:
            try:
                real = real_engine_phase(self)
            except Exception as e:  # the replay phase's numbers still come out
                real = {"real_error": repr(e), "real_job_state": None}
        soak_s = time.monotonic() - t0
        self.done.set()
        exits = {w.name: w.stop() for w in self.workers}
        self.api.stop()
        self.disk.close()
        checks = check_jobs(self.url, self.jobs)
        c = self.count
        out = {
            "minutes": self.args.minutes,
            "workers": self.args.workers,
            "seed": self.args.seed,
            "wall_s": round(soak_s, 1),
            "jobs_submitted": c["jobs_submitted"],
            "jobs_finished": checks["jobs_finished"],
            "trials": checks["trials"],
            "lost_trials": checks["lost_trials"],
            "duplicated_trials": checks["duplicated_trials"],
            "orphan_engines": len(orphan_engines(self.work)),
            "api_requests": c["api_requests"],
            "api_5xx": c["api_5xx"],
            "worker_kills": c["worker_kills"],
            "db_restarts": c["db_restarts"],
            "db_down_s": self.db_down_s,
            "rss_growth_mb": self.rss_growth_mb(),
            "lost_jobs": len(checks["lost_jobs"]),
            "disagreements": sum(len(v) for v in checks["disagreements"].values()),
            "told_by_retry": checks["told_by_retry"],
            "retries_not_run": checks["retries_not_run"],
            "idempotency_breaks": c["idempotency_breaks"],
            "ssrf_accepted": c["ssrf_accepted"],
            "faults": {
                k: c[k]
                for k in ("worker_stalls", "db_fast", "db_immediate", "api_restarts", "disk_fills")
            },
            "disk_fault": self.disk.problem or f"{c['disk_fill_bytes']} bytes to ENOSPC in all",
            "api_unreachable": c["api_unreachable"],
            "cancels": c["cancels"],
            "ssrf_refused": c["ssrf_refused"],
            "job_states": checks["job_states"],
            "unfinished_jobs": checks["unfinished_jobs"],
            "failed_jobs": checks["failed_jobs"],
            "disagreement_detail": checks["disagreements"],
            "worker_exits": exits,
            "first_5xx": self.errors[:5],
            "logs": str(self.root),
            **real,
        }
        return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--minutes", type=float, default=8)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--fault-every", type=float, default=12, help="seconds between faults, on average"
    )
    ap.add_argument(
        "--backlog", type=int, default=4, help="unfinished jobs before the client waits"
    )
    ap.add_argument("--drain-minutes", type=float, default=6, help="how long jobs may take to end")
    ap.add_argument("--json", action="store_true", help="only the JSON line")
    ap.add_argument("--keep-db", action="store_true", help="keep the cluster's data folder")
    ap.add_argument(
        "--real-engine",
        action="store_true",
        help="then one job on real vLLM (CPU build), two workers, one kill (bench/_soak_real.py)",
    )
    args = ap.parse_args()
    out = Soak(args).run()
    if not args.json:
        for k, v in out.items():
            print(f"{k}: {v}")
    print(json.dumps(out))
    bad = [
        k
        for k in (
            "lost_trials",
            "duplicated_trials",
            "orphan_engines",
            "api_5xx",
            "lost_jobs",
            "disagreements",
            "idempotency_breaks",
            "ssrf_accepted",
        )
        if out[k]
    ]
    real_ok = not out.get("real_killed_engine_alive") and out.get("real_kills")
    if args.real_engine and not (real_ok and out["real_job_state"] == "succeeded"):
        bad.append("real_engine")
    return 1 if bad or out["unfinished_jobs"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
