"""Sampled workloads through a whole job with the FAKE engine: the settings reach every
request and every stored measurement, the same prompts as two named workloads are reported
apart, and the distribution check flags a lossy engine (the FAKE's --fake-lossy skews its
sampled tokens). tests/engines/test_sampling_vllm.py runs the check on real vLLM."""

from __future__ import annotations

import json

from tests.fake_space import SPACE
from tests.helpers import run_fake_job
from tuner import cli
from tuner.pareto import job_report
from tuner.space import loads_space
from tuner.storage import Store, TrialModel

SAMPLED = {"temperature": 0.8, "top_p": 0.95}


def _space_text() -> str:
    # Noise is not under test: on a loaded machine the FAKE's tiny runs can look noisy.
    text = SPACE.format(drafts="good_draft", slo=1000, trials=3, confirm=0, search="guided")
    text = text.replace("{confirm_top: 0}", "{confirm_top: 0, max_relative_mad: 10}")
    return text.replace(
        "workload: {num_prompts: 4, max_tokens: 12, warmup_requests: 1}",
        "workloads:\n"
        "  - {name: greedy, num_prompts: 4, max_tokens: 12, warmup_requests: 1}\n"
        "  - {name: sampled, num_prompts: 4, max_tokens: 12, warmup_requests: 1,\n"
        "     sampling: {temperature: 0.8, top_p: 0.95}}",
    )


def _run(space_dir, db_url, launcher) -> int:
    space = loads_space(_space_text(), base_dir=space_dir)
    job_id = run_fake_job(db_url, space, space_dir / "w", launcher)
    return job_id


def test_two_named_workloads_store_their_sampling_and_are_reported_apart(
    space_dir, db_url, fake_launcher, capsys
):
    job_id = _run(space_dir, db_url, fake_launcher)
    capsys.readouterr()
    assert cli.main(["trials", str(job_id), "--json", "--db", db_url]) == 0
    trials = json.loads(capsys.readouterr().out)
    done = [t for t in trials if t["state"] == "complete"]
    assert len(done) == 3
    for t in done:
        by_name = {m["workload"]: m["sampling"] for m in t["measurements"]}
        assert by_name == {"greedy": {"temperature": 0.0}, "sampled": SAMPLED}
    spec = [t for t in done if t["method"] != "none"]
    assert spec and all(t["lossless_p_value"] is not None for t in spec)
    assert all(t["lossless_p_value"] >= 0.01 for t in spec)  # the FAKE samples losslessly
    with Store(db_url).session() as s:
        base = s.query(TrialModel).filter_by(job_id=job_id, number=0).one()
        assert base.lossless_p_value is None  # the reference itself
        assert len(base.sampled_token_ids) == 4  # lossless.sampled_prompts
        assert all(len(p) == 48 and len(p[0]) == 16 for p in base.sampled_token_ids)

    greedy = job_report(Store(db_url), job_id, workload="greedy")
    sampled = job_report(Store(db_url), job_id, workload="sampled")
    assert greedy.sampling == {"temperature": 0.0} and sampled.sampling == SAMPLED
    assert {p.metrics["workload"] for p in sampled.points} == {"sampled"}  # never averaged
    assert cli.main(["report", str(job_id), "--workload", "sampled", "--db", db_url]) == 0
    assert "found under temperature 0.8, top-p 0.95)" in capsys.readouterr().out
    assert cli.main(["report", str(job_id), "--db", db_url]) == 0
    assert "found under greedy decoding)" in capsys.readouterr().out
    assert cli.main(["report", str(job_id), "--workload", "nope", "--db", db_url]) == 2
    assert "this job measured workload 'greedy', 'sampled', not 'nope'" in capsys.readouterr().err


def test_the_distribution_check_flags_an_engine_that_samples_otherwise(
    space_dir, db_url, fake_launcher
):
    job_id = _run(space_dir, db_url, [*fake_launcher, "--fake-lossy"])
    rep = job_report(Store(db_url), job_id, workload="sampled")
    flagged = [p for p in rep.points if p.method != "none"]
    assert flagged
    for p in flagged:
        assert p.lossless_p_value is not None and p.lossless_p_value < 0.01
        assert not p.feasible
        assert any(
            "sampled outputs differ from the baseline's distribution" in v for v in p.violations
        )
    assert rep.winner is not None and rep.winner.method == "none"
