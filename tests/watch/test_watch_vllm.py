"""``spectune watch`` against a real vLLM CPU server (the tiny in-repo target, n-gram k=4):
the per-position acceptance it reports equals, within 0.01, the counter deltas read
directly from the server's /metrics around the same window (no request runs outside it).

The job it is judged against is the FAKE chain-surface job (conftest): its predictions are
not the point here, the window's acceptance is. One launch, about a minute."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, TINY, vllm_available
from tuner.engines import EngineConfig, VLLMServer, fetch_metrics_text, parse_spec_counters
from tuner.loadgen import _Req, run_requests
from tuner.metrics import spec_delta
from tuner.workloads import builtin_path, read_jsonl

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed"),
    pytest.mark.timeout(600),
]

NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_min": 1,
    "prompt_lookup_max": 3,
}
WINDOW_S = 30


def test_watch_acceptance_equals_the_counter_deltas(tmp_path, watched_job):
    db, job, _ = watched_job
    cfg = EngineConfig(
        model=f"{TINY}/target",
        served_model_name="fake",
        max_model_len=512,
        max_num_seqs=4,
        memory_fraction=0.1,
        speculative_config=NGRAM,
        enforce_eager=True,
    )
    prompts = read_jsonl(builtin_path("code_completion"))[:12]
    with VLLMServer(cfg, tmp_path / "vllm.log", cache_root=tmp_path / "cache") as srv:
        before = parse_spec_counters(asyncio.run(fetch_metrics_text(srv.base_url)))
        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tuner.cli",
                "watch",
                "--url",
                srv.base_url,
                "--job",
                str(job),
                "--once",
                "--json",
                "--interval",
                str(WINDOW_S),
                "--db",
                db,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(5)  # the watch's first scrape is made
        t0 = time.monotonic()
        got, _ = asyncio.run(
            run_requests(srv.base_url, "fake", [_Req(p, 64) for p in prompts], 4, 120)
        )
        assert all(r.ok for r in got), [r.error for r in got]
        assert time.monotonic() - t0 < WINDOW_S - 8, "the load must end inside the window"
        out, err = watch.communicate(timeout=WINDOW_S + 60)
        after = parse_spec_counters(asyncio.run(fetch_metrics_text(srv.base_url)))
    assert watch.returncode == 0, err
    r = json.loads(out)
    direct = spec_delta(before, after)
    assert direct is not None and direct.num_drafts >= 100
    assert r["num_drafts"] == direct.num_drafts
    assert r["num_accepted_tokens"] == direct.num_accepted_tokens
    assert len(r["per_position_acceptance"]) == 4 == r["server_depth"]
    for w, d in zip(r["per_position_acceptance"], direct.per_position_acceptance, strict=True):
        assert abs(w - d) <= 0.01
    assert r["verdict"] != "cannot tell yet"
    # the FAKE job's winner was "served" from another folder: named, as it must be
    assert any(d.startswith("model: the server loads") for d in r["config_differences"])
    assert not any(d.startswith(("depth", "served name")) for d in r["config_differences"])
