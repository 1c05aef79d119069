"""One definition of "pays": the Pareto table's speedup, the round-cost table, "Why this
winner", the crossover, the schedule export and the API all read the same verdict.

The job is replayed from a small FAKE surface written here (numbers chosen, measured by
nothing), so the stored report is known: depth 2 pays at concurrency 1 and is tied with the
baseline within noise at 4; depth 1 is tied at 4 too.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from tests.helpers import make_settings
from tuner.api import create_app
from tuner.cli._render import report_text
from tuner.explain import explain
from tuner.export import depth_schedule, export_point
from tuner.job import create_job, run_job
from tuner.pareto import job_report
from tuner.space import loads_space
from tuner.storage import Store
from tuner.surface import FORMAT

SPACE = """
name: one-verdict
engine: {kind: replay, surface: SURFACE, model: target, served_model_name: fake}
methods:
  ngram:
    num_speculative_tokens: {min: 1, max: 2}
    prompt_lookup_min: {min: 1, max: 1}
    prompt_lookup_max: {min: 3, max: 3}
max_num_seqs: [4]
concurrency: [1, 4]
objective_concurrency: 1
workload: {builtin: code_completion, num_prompts: 4, max_tokens: 16}
measurement: {repeats: 3, confirm_top: 0, prune: false}
slo: {p99_tpot_ms: 100}
start_with:
  - {method: ngram, num_speculative_tokens: 1}
  - {method: ngram, num_speculative_tokens: 2}
trials: 3
seed: 0
"""

# (config depth or 0 for the baseline, concurrency) -> (mean end-to-end ms per output token,
# its 95% interval); a request has 16 tokens
TPOT = {
    (0, 1): (10.0, 9.8, 10.2),
    (0, 4): (12.0, 11.5, 12.5),
    (1, 1): (9.0, 8.8, 9.2),
    (1, 4): (11.9, 11.0, 12.8),
    (2, 1): (8.0, 7.8, 8.2),
    (2, 4): (11.8, 11.0, 12.6),
}


def _metrics(depth: int, level: int) -> dict:
    tpot, lo, hi = TPOT[(depth, level)]
    tps = level * 1000.0 / tpot

    def st(v: float, lo: float, hi: float) -> dict:
        return {"median": v, "mad": v * 0.01, "ci95_low": lo, "ci95_high": hi, "n": 3}

    return {
        "workload": "code_completion",
        "concurrency": level,
        "output_tok_per_s": tps,
        "p99_tpot_ms": tpot * 1.2,
        "mean_tpot_ms": tpot,
        "mean_e2e_ms": 16 * tpot,
        "output_tokens": 12 * 16,
        "num_ok": 12,
        "num_failed": 0,
        "num_requests": 12,
        "noisy": False,
        "acceptance_rate": 0.6 if depth else None,
        "mean_acceptance_length": 1 + 0.6 * depth if depth else None,
        "stats": {
            "output_tok_per_s": st(tps, tps * 0.99, tps * 1.01),
            "p99_tpot_ms": st(tpot * 1.2, lo * 1.2, hi * 1.2),
            "mean_tpot_ms": st(tpot, lo, hi),
            "mean_e2e_ms": st(16 * tpot, 16 * lo, 16 * hi),
        },
    }


def _job(tmp_path: Path, db_url: str) -> tuple[Store, int]:
    surface = tmp_path / "surface.jsonl"
    space = loads_space(SPACE.replace("SURFACE", str(surface)), base_dir=tmp_path)
    configs = [{"method": "none", "max_num_seqs": 4, "memory_fraction": 0.1}] + [
        {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 3,
            "max_num_seqs": 4,
            "memory_fraction": 0.1,
        }
        for k in (1, 2)
    ]
    lines = [json.dumps({"format": FORMAT, "space": space.model_dump(mode="json")})]
    for c in configs:
        for level in (1, 4):
            m = _metrics(c.get("num_speculative_tokens", 0), level)
            lines.append(
                json.dumps(
                    {
                        "config": c,
                        "state": "complete",
                        "workload": "code_completion",
                        "concurrency": level,
                        "metrics": m,
                        "lossless_match_rate": 1.0,
                    }
                )
            )
    surface.write_text("\n".join(lines) + "\n")
    store = Store(db_url)
    job_id = create_job(store, space)
    run_job(store, job_id, work_dir=tmp_path / "w")
    return store, job_id


def test_every_output_reads_the_same_verdict(tmp_path, db_url):
    store, job_id = _job(tmp_path, db_url)
    rep = job_report(store, job_id)
    w = rep.winner
    assert w is not None and w.params["num_speculative_tokens"] == 2
    v1, v4 = rep.verdicts[w.trial_number]
    assert (v1.concurrency, v1.state, v4.concurrency, v4.state) == (1, "pays", 4, "tied")
    assert rep.speedup(w) == v1.speedup == 10.0 / 8.0
    assert rep.crossover[w.trial_number] == 4

    # The Pareto table's speedup and the round-cost table say the same.
    why = explain(rep)
    text = report_text(rep, why)
    assert "1.25x pays" in text
    row = next(line for line in text.splitlines() if line.startswith(f"{w.trial_number} "))
    assert "+25% pays" in row and "tied" in row and "concurrency 4" in row
    # "Why this winner": the same verdict, no contradiction.
    joined = "\n".join(why)
    assert v1.text() in joined and "pays off by 25.0%" in joined
    assert "It stops paying from concurrency 4 (c=1 pays, c=4 tied)" in joined
    assert "pays at every concurrency" not in joined
    # The schedule: a level where the best depth only ties the baseline keeps speculating (a
    # tie is what noise alone can give), so depth 2 holds everywhere: no schedule.
    assert depth_schedule(rep) is None

    # The API and its UI read the same numbers.
    settings = make_settings(tmp_path, database_url=db_url)
    with TestClient(create_app(settings, run_worker=False)) as c:
        api = c.get(f"/api/jobs/{job_id}/pareto").json()
    point = next(
        p for p in api["points"] if p["trial_number"] == w.trial_number and p["concurrency"] == 1
    )
    assert point["speedup"] == v1.speedup and point["verdict"] == "pays"
    rc = next(r for r in api["round_cost"] if r["trial_number"] == w.trial_number)
    assert [v["state"] for v in rc["verdicts"]] == ["pays", "tied"]
    assert rc["crossover_concurrency"] == 4
    assert api["why"] == why


def test_the_schedule_switches_speculation_off_only_where_it_does_not_pay(
    tmp_path, db_url, monkeypatch
):
    # At concurrency 4 both depths are slower than the baseline beyond every interval.
    monkeypatch.setitem(TPOT, (1, 4), (13.5, 13.2, 13.8))
    monkeypatch.setitem(TPOT, (2, 4), (13.0, 12.8, 13.2))
    store, job_id = _job(tmp_path, db_url)
    rep = job_report(store, job_id)
    w = rep.winner
    assert w is not None and [v.state for v in rep.verdicts[w.trial_number]] == [
        "pays",
        "does not pay",
    ]
    assert depth_schedule(rep) == [[1, 3, 2], [4, 4, 0]]
    sched = json.loads(export_point(w, "vllm-schedule-json", rep))  # a replay refuses export_job
    assert sched["num_speculative_tokens_per_batch_size"] == [[1, 3, 2], [4, 4, 0]]
