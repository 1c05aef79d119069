"""Shared pieces of the fault tests: a FAKE job space, worker subprocesses, and the checks
of what survived (trials lost, trials measured twice).

The engine is the FAKE OpenAI server (tests/fake_openai_server.py) slowed down so a fault
lands mid-trial; the worker is a real process started from ``worker_entry.py``, which builds
``Worker(measurers=fake_measurers(…))`` as a test may and the product cannot.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna

from tests.fake_space import make_space_dir
from tuner.job import create_job
from tuner.space import loads_space
from tuner.storage import Store, TrialModel

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

SPACE = """
name: fault-job
engine: {{model: target, served_model_name: fake, startup_timeout_s: {startup}}}
methods:
  ngram: {{num_speculative_tokens: {{min: 1, max: 3}}}}
  draft_model: {{num_speculative_tokens: {{min: 1, max: 3}}, drafts: [good_draft]}}
max_num_seqs: [4, 8]
concurrency: [1]
workload: {{num_prompts: 3, max_tokens: {tokens}, warmup_requests: 0, request_timeout_s: {rt}}}
slo: {{p99_tpot_ms: 100000}}
measurement: {{repeats: 1, max_relative_mad: 10, remeasure: 0, confirm_top: 0, prune: false}}
trials: {trials}
stop_early: false
seed: 5
"""

# Seconds per trial on the FAKE engine: token_ms x tokens x 3 prompts, plus its start.
TOKEN_MS = 25


def submit(
    url: str,
    root: Path,
    *,
    trials: int,
    tokens: int = 40,
    startup: float = 30,
    request_timeout: float = 60,
) -> int:
    """A queued API job (as ``POST /api/jobs`` leaves it) on the FAKE space."""
    d = root / "space"
    if not d.exists():
        make_space_dir(d)
    text = SPACE.format(trials=trials, tokens=tokens, startup=startup, rt=request_timeout)
    store = Store(url)
    job_id = create_job(store, loads_space(text, base_dir=d))
    store.release_to_workers(job_id, key=None, digest="fault-test")
    return job_id


def start_worker(
    url: str,
    work_dir: Path,
    name: str,
    *,
    devices: str | None = None,
    token_ms: int = TOKEN_MS,
    heartbeat_s: float = 0.5,
    stale_after_s: float = 3.0,
    log: Path | None = None,
) -> subprocess.Popen:
    """A ``spectune worker`` process (tests/faults/worker_entry.py) on ``url``."""
    argv = [
        sys.executable,
        str(HERE / "worker_entry.py"),
        "--db",
        url,
        "--work-dir",
        str(work_dir),
        "--worker-id",
        name,
        "--token-ms",
        str(token_ms),
        "--heartbeat-s",
        str(heartbeat_s),
        "--stale-after-s",
        str(stale_after_s),
    ]
    if devices is not None:
        argv += ["--devices", devices]
    out = open(log or work_dir.parent / f"{name}.log", "ab")  # the child process writes it
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)


def wait_for(pred: Callable[[], object], timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def running_trial(url: str, job_id: int) -> TrialModel | None:
    rows = Store(url).trials(job_id, states=("running",))
    return rows[0] if rows else None


def engine_groups(work_dir: Path) -> list[int]:
    """Process groups of the engines the workers in ``work_dir`` have running (pid files)."""
    run = work_dir / "run"
    if not run.is_dir():
        return []
    return [json.loads(p.read_text())["pgid"] for p in run.glob("engine-*.json")]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)


def survivors(url: str, job_id: int) -> dict[str, object]:
    """What the job kept: its rows by outcome, and the two numbers a fault must leave at 0.

    - lost: trials of the budget without an outcome (complete, pruned, or failed for a reason
      of its own), after retries;
    - duplicated: the same trial (an original and its retries, one chain) with results stored
      more than once, or a trial number stored twice.
    """
    store = Store(url)
    job = store.job(job_id)
    rows = store.trials(job_id)
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=url)
    root = {t.number: t.system_attrs.get("failed_trial", t.number) for t in study.trials}
    measured: dict[int, int] = {}
    for r in rows:
        if r.measurements and r.reused_from is None:
            chain = root.get(r.number, r.number)
            measured[chain] = measured.get(chain, 0) + 1
    outcome = [
        r
        for r in rows
        if r.state in ("complete", "pruned")
        or (r.state == "fail" and r.fail_reason != "interrupted")
    ]
    numbers = [r.number for r in rows]
    return {
        "state": job.state,
        "n_trials": job.n_trials,
        "interrupted": [r.number for r in rows if r.fail_reason == "interrupted"],
        "retries": {
            t.number: t.system_attrs["failed_trial"]
            for t in study.trials
            if "failed_trial" in t.system_attrs
        },
        "optuna_states": [t.state.name for t in study.trials],
        "workers": sorted({(r.worker_id, r.devices) for r in rows}, key=str),
        "lost": job.n_trials - len(outcome),
        "duplicated": sum(n - 1 for n in measured.values()) + len(numbers) - len(set(numbers)),
    }
