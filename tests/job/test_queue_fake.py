"""A whole job whose max_num_seqs queues requests, on the FAKE engine (tests/
fake_openai_server.py honours --max-num-seqs: at most that many requests at once, the rest
wait, the wait exposed as vLLM's queue-time histogram). Its numbers measure nothing real:
the test checks the data flow, that the wait reaches TTFT and the queue metric, and that
each batch class gets its own baseline.
"""

from __future__ import annotations

from tests.helpers import run_fake_job
from tuner.pareto import job_report
from tuner.space import loads_space
from tuner.storage import Store

SPACE = """
name: fake-queue
engine: {model: target, served_model_name: fake, startup_timeout_s: 30}
methods:
  ngram:
    num_speculative_tokens: {min: 1, max: 2}
    prompt_lookup_min: {min: 1, max: 1}
    prompt_lookup_max: {min: 3, max: 3}
max_num_seqs: [2, 4]
concurrency: [1, 4]
workload: {num_prompts: 8, max_tokens: 12, warmup_requests: 1}
slo: {p99_ttft_ms: 10000}
measurement: {repeats: 2, max_relative_mad: 10, confirm_top: 0, prune: false}
trials: 6
seed: 3
"""


def test_a_batch_below_the_concurrency_queues_on_the_fake(space_dir, db_url, fake_launcher):
    store = Store(db_url)
    launcher = [*fake_launcher, "--fake-token-ms", "4"]
    job_id = run_fake_job(
        db_url, loads_space(SPACE, base_dir=space_dir), space_dir / "w", launcher
    )
    rows = [r for r in store.trials(job_id) if r.reused_from is None and r.state == "complete"]
    base = {r.params["max_num_seqs"]: r for r in rows if r.params["method"] == "none"}
    assert set(base) == {2, 4}, [(r.params, (r.search or {}).get("by")) for r in rows]
    spec2 = [r for r in rows if r.params["method"] == "ngram" and r.params["max_num_seqs"] == 2]
    assert spec2 and (spec2[0].search or {}).get("by") == "guide: batch"

    def at4(r) -> dict:
        return next(m.metrics for m in r.measurements if m.concurrency == 4)

    q2, q4 = at4(base[2]), at4(base[4])
    # 4 clients on 2 slots: half the requests wait for a slot; on 4 slots none does
    assert q2["mean_ttft_ms"] > q4["mean_ttft_ms"] and q2["p99_ttft_ms"] > q4["p99_ttft_ms"]
    assert q2["mean_queue_ms"] > 0 and q4["mean_queue_ms"] == 0
    assert q2["output_tok_per_s"] < q4["output_tok_per_s"]
    rep = job_report(store, job_id)
    assert rep.baselines.for_trial(spec2[0].number) == base[2].number
    assert rep.baseline is not None and rep.baseline.trial_number == base[4].number
