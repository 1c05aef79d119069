"""The soak's real-engine phase (``bench/soak.py --real-engine``): two workers, one job on the
tiny vLLM default (vLLM's CPU build, the in-repo target, n-gram only, 2 trials), and one
``kill -9`` of the worker whose engine is up. The killed worker's engine is a process group
of its own, so the kill leaves it running without an owner: a live worker must stop it
(``tuner.engines.reap_stale``, while idle or at start), and the job must still end. The
soak's orphan check then holds for real engine process groups, not only for replayed jobs.

Minutes on 2 cores: each launch starts vLLM (~30 s eager) and measures a few seconds.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx

from tests.faults.faultkit import engine_groups, group_alive
from tuner.states import JOB_ENDED
from tuner.storage import Store

if TYPE_CHECKING:
    from bench.soak import Soak

__all__ = ["REAL_SPACE", "real_engine_phase"]

# Paths are relative to the service's search_spaces folder (as the submitter's replay jobs).
REAL_SPACE = """\
name: soak-real
engine: {kind: vllm, model: ../models/tiny/target, served_model_name: tiny-target,
         max_model_len: 512, device: cpu, enforce_eager: true, startup_timeout_s: 300}
methods:
  ngram: {num_speculative_tokens: {min: 2, max: 2}, prompt_lookup_min: {min: 1, max: 1},
          prompt_lookup_max: {min: 3, max: 3}}
max_num_seqs: [4]
memory_fraction: [0.15]
concurrency: [1]
workload: {builtin: code_completion, num_prompts: 4, max_tokens: 16, warmup_requests: 1}
measurement: {repeats: 2, max_relative_mad: 10, confirm_top: 0, confirm_budget: 0,
              max_host_load: 1}
slo: {p99_tpot_ms: 1000}
trials: 2
seed: 0
"""


def _owner_of(soak: Soak, pgid: int) -> Any | None:
    """The worker process whose engine group ``pgid`` is (its pid file names the owner)."""
    for p in (soak.work / "run").glob("engine-*.json"):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("pgid") == pgid:
            return next((w for w in soak.workers if w.pid == rec.get("owner_pid")), None)
    return None


def real_engine_phase(soak: Soak, *, minutes: float = 12) -> dict[str, Any]:
    """Run the phase on the soak's running service and database; what it saw."""
    out: dict[str, Any] = {"real_job": None, "real_kills": 0, "real_engines_reaped": 0}
    for w in soak.workers[2:]:
        w.stop(timeout_s=30)  # two workers, as the issue asks
    for w in soak.workers[:2]:
        if not w.alive():
            w.start()
    deadline = time.monotonic() + minutes * 60
    with httpx.Client(timeout=60) as client:
        body = {"search_space_yaml": REAL_SPACE}
        job_id = soak._submit_once(client, body, f"soak-real-{uuid.uuid4()}")
    out["real_job"] = job_id
    soak.jobs.add(job_id)
    store = Store(soak.url)
    killed_group: int | None = None
    killed_at = 0.0
    while time.monotonic() < deadline:
        if killed_group is None:
            for g in engine_groups(soak.work):
                owner = _owner_of(soak, g)
                if owner is not None and group_alive(g):
                    time.sleep(5)  # the engine is starting or serving: mid-trial
                    owner.signal(signal.SIGKILL)
                    owner.popen.wait()
                    out["real_kills"] += 1
                    killed_group, killed_at = g, time.monotonic()
                    time.sleep(3)
                    owner.start()  # a restarted worker reaps what it left, first thing
                    break
        elif not out["real_engines_reaped"] and not group_alive(killed_group):
            out["real_engines_reaped"] = 1
            out["real_reaped_after_s"] = round(time.monotonic() - killed_at, 1)
        if store.job(job_id).state in JOB_ENDED:
            break
        time.sleep(1)
    job = store.job(job_id)
    out["real_job_state"] = str(job.state)
    out["real_trials"] = len(store.trials(job_id))
    out["real_killed_engine_alive"] = killed_group is not None and group_alive(killed_group)
    return out
