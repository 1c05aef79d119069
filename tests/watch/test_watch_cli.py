"""``spectune watch`` against the FAKE vLLM /metrics server (tests/fake_vllm_metrics.py):
scripted counters, so every expected number below is computed from the script, and the
FAKE chain-surface job (conftest). No engine, nothing measured."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.fake_vllm_metrics import Snap, fake_vllm, snap_after
from tuner.cli import main
from tuner.search._offline import predict_from_baseline
from tuner.storage import Store
from tuner.watch import MIN_DRAFTS, load_job_model

START = Snap(drafts=500, draft_tokens=2000, accepted=900, per_pos=[350, 250, 180, 120])


def run_watch(capsys, url: str, db: str, job: int, *extra: str) -> tuple[int, str, str]:
    args = ["watch", "--url", url, "--job", str(job), "--once", "--interval", "0.3"]
    code = main([*args, "--sample", "0.1", "--db", db, *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def watch_json(capsys, script, watched_job, **kw) -> dict:
    db, job, root = watched_job
    with fake_vllm(script, root=str(root / "target"), **kw) as (url, _):
        code, out, err = run_watch(capsys, url, db, job, "--json")
    assert code == 0, err
    return json.loads(out)


def test_deltas_are_exact_and_per_position_is_the_delta_ratio(capsys, watched_job):
    end = snap_after(START, 400, [0.8, 0.6, 0.45, 0.3], running=3, waiting=1)
    r = watch_json(capsys, [START, end], watched_job)
    d = end.drafts - START.drafts
    assert r["num_drafts"] == d == 400
    assert r["num_draft_tokens"] == end.draft_tokens - START.draft_tokens
    assert r["num_accepted_tokens"] == end.accepted - START.accepted
    want = [(a - b) / d for a, b in zip(end.per_pos, START.per_pos, strict=True)]
    assert r["per_position_acceptance"] == pytest.approx(want)
    acc = (end.accepted - START.accepted) / (end.draft_tokens - START.draft_tokens)
    assert r["acceptance_rate"] == pytest.approx(acc)
    assert r["mean_acceptance_length"] == pytest.approx(1 + (end.accepted - START.accepted) / d)
    # the gauges' mean over every scrape: the first saw 1 running, the others 3
    assert 1 < r["live_concurrency"] <= 3 and 0 < r["live_waiting"] <= 1
    assert r["server_depth"] == 4 and r["config_differences"] == []


def test_predictions_are_the_job_models_at_the_live_acceptance(capsys, watched_job):
    db, job, _ = watched_job
    end = snap_after(START, 400, [0.8, 0.6, 0.45, 0.3], running=1)
    r = watch_json(capsys, [replace(START, running=1), end], watched_job)
    model = load_job_model(Store(db), job)
    lv = model.levels[r["model_concurrency"]]
    assert r["model_concurrency"] == 1  # one running request: the job's level 1
    preds = {p["depth"]: p for p in r["predictions"]}
    assert sorted(preds) == [0, 1, 2, 3, 4]
    assert all(p["kind"] == "predicted" and f"job {job}" in p["source"] for p in preds.values())
    base = lv.baseline.metrics["output_tok_per_s"]
    assert preds[0]["output_tok_per_s"] == pytest.approx(base)
    for k in range(1, 5):
        c = lv.cost
        want = predict_from_baseline(
            k,
            r["per_position_acceptance"],
            lv.baseline,
            model.objective,
            c.fixed,
            c.per_token,
            c.rel_sigma,
        )
        assert preds[k]["output_tok_per_s"] == pytest.approx(want.metrics["output_tok_per_s"])
        assert preds[k]["mean_tpot_ms"] == pytest.approx(want.metrics["mean_tpot_ms"])
        p = preds[k]
        assert p["output_tok_per_s_low"] < p["output_tok_per_s"] < p["output_tok_per_s_high"]
        assert p["speedup_vs_no_spec"] == pytest.approx(p["output_tok_per_s"] / base)
    assert r["predicted_speedup"] == pytest.approx(preds[4]["speedup_vs_no_spec"])


def test_a_restarted_server_cannot_tell_and_never_gives_a_negative_rate(capsys, watched_job):
    mid = snap_after(START, 300, [0.7, 0.5, 0.35, 0.25])
    after_restart = snap_after(Snap(per_pos=[0, 0, 0, 0]), 50, [0.7, 0.5, 0.35, 0.25])
    r = watch_json(capsys, [START, mid, after_restart], watched_job)
    assert r["verdict"] == "cannot tell yet" and r["verdict_code"] == 0
    assert "restarted" in r["reason"] and "fell from" in r["reason"]
    assert r["num_drafts"] is None and r["per_position_acceptance"] == []
    assert r["predicted_speedup"] is None


def test_too_few_drafts_cannot_tell_yet(capsys, watched_job):
    end = snap_after(START, MIN_DRAFTS - 1, [0.0, 0.0, 0.0, 0.0])
    r = watch_json(capsys, [START, end], watched_job)
    assert r["num_drafts"] == MIN_DRAFTS - 1
    assert r["verdict"] == "cannot tell yet" and f"< {MIN_DRAFTS}" in r["reason"]
    assert r["recommended_depth"] is None


@pytest.mark.parametrize(
    ("rates", "verdict", "depth"),
    [
        ([0.95, 0.9, 0.85, 0.8], "still pays", 4),  # better than the job measured
        ([0.3, 0.1, 0.05, 0.0], "switch to k=1", 1),  # deeper drafts are all rejected
        ([0.0, 0.0, 0.0, 0.0], "turn speculation off", 0),  # nothing accepted
    ],
)
def test_the_verdict_follows_the_live_acceptance(capsys, watched_job, rates, verdict, depth):
    r = watch_json(capsys, [START, snap_after(START, 400, rates)], watched_job)
    assert (r["verdict"], r["recommended_depth"]) == (verdict, depth)
    speed = {p["depth"]: p["speedup_vs_no_spec"] for p in r["predictions"]}
    assert max(speed, key=speed.get) == depth


def test_acceptance_outside_the_jobs_range_widens_the_band_and_says_so(capsys, watched_job):
    inside = watch_json(
        capsys, [START, snap_after(START, 400, [0.7, 0.5, 0.35, 0.25])], watched_job
    )
    outside = watch_json(
        capsys, [START, snap_after(START, 400, [0.95, 0.9, 0.85, 0.8])], watched_job
    )
    p_in, p_out = inside["predictions"][4], outside["predictions"][4]
    assert not any("outside" in n for n in p_in["notes"])
    assert any("outside what job" in n and "band widened" in n for n in p_out["notes"])
    assert p_out["band_rel"] > p_in["band_rel"]


def test_a_server_unlike_the_winner_is_named(capsys, watched_job):
    k3 = Snap(drafts=10, draft_tokens=30, accepted=10, per_pos=[5, 3, 2], memory=0.9)
    end = snap_after(k3, 200, [0.7, 0.5, 0.35], memory=0.9)
    r = watch_json(capsys, [k3, end], watched_job, name="other-name")
    diffs = " | ".join(r["config_differences"])
    assert "depth: the server drafts k=3" in diffs and "winner k=4" in diffs
    assert "memory fraction: the server 0.9" in diffs
    assert "served name" in diffs
    assert any("method" in n for n in r["not_compared"])
    assert [p["depth"] for p in r["predictions"]] == [0, 1, 2, 3]  # only depths it drafts


def test_text_output_labels_predictions_and_says_the_verdict(capsys, watched_job):
    db, job, root = watched_job
    end = snap_after(START, 400, [0.3, 0.1, 0.05, 0.0])
    with fake_vllm([START, end], root=str(root / "target")) as (url, _):
        code, out, _ = run_watch(capsys, url, db, job)
    assert code == 0
    assert f"Predicted by job {job}'s model" in out and "(not measured)" in out
    assert "Verdict: switch to k=1" in out


@pytest.mark.parametrize("bad", ["localhost:8000", "ftp://h:1", "http://h:1/v1", "http://h:x"])
def test_a_bad_url_is_refused_naming_the_field(capsys, watched_job, bad):
    db, job, _ = watched_job
    code, out, err = run_watch(capsys, bad, db, job)
    assert code == 2 and out == "" and "url:" in err


def test_an_unknown_job_is_refused_naming_the_field(capsys, watched_job):
    db, _, _ = watched_job
    code, _, err = run_watch(capsys, "http://127.0.0.1:9", db, 999)
    assert code == 2 and "--job" in err and "999" in err


def test_an_unreachable_server_is_a_runtime_failure_naming_the_url(capsys, watched_job):
    db, job, _ = watched_job
    code, _, err = run_watch(capsys, "http://127.0.0.1:9", db, job)
    assert code == 1 and "--url" in err and "/metrics" in err


def test_a_restart_the_counters_hide_is_caught_by_the_start_time(capsys, watched_job):
    # counters higher than before, but the process started again: not one server run
    later = snap_after(START, 400, [0.7, 0.5, 0.35, 0.25])
    a = replace(START, started_at=1000.0)
    b = replace(later, drafts=later.drafts + 5000, started_at=2000.0)
    r = watch_json(capsys, [a, b], watched_job)
    assert r["verdict"] == "cannot tell yet" and "started again" in r["reason"]


def test_a_gap_inside_the_window_cannot_tell(capsys, watched_job):
    end = snap_after(START, 400, [0.7, 0.5, 0.35, 0.25])
    r = watch_json(capsys, [START, None, end], watched_job)
    assert r["verdict"] == "cannot tell yet" and "could not be read" in r["reason"]
    assert r["num_drafts"] is None
