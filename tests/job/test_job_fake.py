"""A whole job through Optuna, storage, Pareto, CLI and export, with the FAKE engine.

The fake engine stands in only so this test is fast; tests/test_engine_vllm.py runs the same
path against real vLLM.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna

from tests.fake_space import SPACE, _space
from tests.helpers import TINY, fake_measurers, run_fake_job
from tuner import cli
from tuner.explain import explain
from tuner.job import WorkerContext, create_job, run_job
from tuner.pareto import job_report
from tuner.space import loads_space
from tuner.storage import JobModel, Store, TrialModel


def test_front_is_optunas_feasible_front(space_dir, db_url, fake_launcher):
    """Before confirmation re-measures anything, our front (re-evaluable for any SLO) is the
    one Optuna's best_trials gives, less repeats of an already measured configuration."""
    job_id = run_fake_job(
        db_url, _space(space_dir, trials=6, confirm=0), space_dir / "w", fake_launcher
    )
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    with Store(db_url).session() as s:
        reused = {
            r.number
            for r in s.query(TrialModel).filter_by(job_id=job_id)
            if r.reused_from is not None
        }
    front = {p.trial_number for p in job_report(Store(db_url), job_id).front}
    assert front and front == {t.number for t in study.best_trials} - reused


def test_job_end_to_end_with_fake_engine(space_dir, db_url, fake_launcher, capsys):
    space = _space(space_dir)
    job_id = create_job(Store(db_url), space)
    events = []
    run_job(
        Store(db_url),
        job_id,
        work_dir=space_dir / "work",
        on_trial=events.append,
        measurers=fake_measurers(fake_launcher),
    )
    trial_events = [e for e in events if e.state != "confirmed"]
    confirmed = [e for e in events if e.state == "confirmed"]
    # every point says how much of the host's CPU other processes took while it was measured
    shares = [
        m.metrics["host_other_cpu_share"]
        for r in Store(db_url).trials(job_id)
        if r.reused_from is None
        for m in r.measurements
    ]
    assert shares and all(0.0 <= s <= 1.0 for s in shares), shares
    # 8 is a cap: the job stops when nothing left can win, and says why
    n = len(trial_events)
    assert 3 <= n <= 8
    assert Store(db_url).job(job_id).stop_reason
    # the baseline first, then the winner and the runner-up (confirm_top 2 by default), each
    # to two launches, within the confirmation budget (4 by default)
    assert 2 <= len(confirmed) <= space.measurement.confirm_budget == 4
    assert confirmed[0].method == "none"
    # The fake's configurations are near ties, so a launch may hand the lead to one launched
    # once: the job confirms until the budget is spent, and then says the winner is not.
    rep = job_report(Store(db_url), job_id)
    assert rep.winner_confirmed or len(confirmed) == space.measurement.confirm_budget
    assert rep.winner_confirmed or "unconfirmed" in " ".join(explain(rep))
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    assert len(study.trials) == n
    assert study.trials[0].params["method"] == "none"  # the baseline is enqueued first
    with Store(db_url).session() as s:
        job = s.get(JobModel, job_id)
        assert job.state == "succeeded"
        rows = s.query(TrialModel).filter_by(job_id=job_id).order_by(TrialModel.number).all()
        launched = [r for r in rows if r.reused_from is None and r.state == "complete"]
        # one launch per distinct engine configuration, never twice; confirmations apart
        assert job.engine_launches == len({r.engine_key for r in launched})
        assert job.confirm_launches == len(confirmed)
        done = {e.number for e in confirmed}
        for r in rows:
            for m in r.measurements:
                assert m.metrics.get("confirmed", False) == (r.number in done)
                assert (
                    m.metrics["repeats"] == 3
                    and "ci95_low" in m.metrics["stats"]["output_tok_per_s"]
                )
                if r.number in done:
                    assert "output_tok_per_s" in m.metrics["search"]
        assert all(len(r.measurements) == 2 for r in rows if r.state == "complete")
        assert all(r.log_path and Path(r.log_path).exists() for r in launched)

    rep = job_report(Store(db_url), job_id)
    assert rep.baseline is not None and rep.winner is not None

    assert cli.main(["trials", str(job_id), "--json", "--db", db_url]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert [r["state"] for r in recs] == ["complete"] * n
    r0 = recs[0]
    assert r0["method"] == "none" and r0["params"]["method"] == "none"
    for key in (
        "p99_tpot_ms",
        "output_tok_per_s",
        "p50_ttft_ms",
        "p90_e2e_ms",
        "goodput_req_per_s",
    ):
        assert isinstance(r0[key], float), key
    spec = [r for r in recs if r["method"] != "none"]
    assert spec and all(0 <= r["acceptance_rate"] <= 1 for r in spec)
    assert all(r["mean_acceptance_length"] >= 1 for r in spec)

    assert cli.main(["jobs", "--json", "--db", db_url]) == 0
    jobs = json.loads(capsys.readouterr().out)
    assert jobs[0]["id"] == job_id and jobs[0]["state"] == "succeeded"

    assert cli.main(["export", str(job_id), "--format", "vllm-json", "--db", db_url]) == 0
    out = capsys.readouterr().out.strip()
    exported = json.loads(out)
    assert exported == rep.winner.engine_config["speculative_config"]
    assert cli.main(["export", str(job_id), "--format", "vllm-cli", "--db", db_url]) == 0
    line = capsys.readouterr().out.strip()
    *notes, command = line.splitlines()  # the command is one line, notes are comments
    assert "vllm serve" in command and all(n.startswith("# ") for n in notes)


def test_preflight_refuses_mismatched_vocab_without_launch(space_dir, db_url, fake_launcher):
    # Optuna's own sampler, seeded: its first trials are drawn at random whatever the fake
    # measures, so the draft is asked for on any host. The guided search reads the fake's
    # timings, so whether it gets to the draft before it stops depends on the host.
    space = _space(space_dir, drafts="bad_vocab", trials=6, search="sampler")
    job_id = run_fake_job(db_url, space, space_dir / "work", fake_launcher)
    with Store(db_url).session() as s:
        rows = s.query(TrialModel).filter_by(job_id=job_id, method="draft_model").all()
        assert rows, "seed 3's random start should ask for draft_model in 6 trials"
        for r in rows:
            assert r.state == "fail" and r.fail_reason == "invalid_config"
            assert "share a vocabulary" in r.fail_detail
            assert r.log_path is None  # no engine was launched
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    states = {t.state for t in study.trials}
    assert optuna.trial.TrialState.FAIL in states and optuna.trial.TrialState.COMPLETE in states


def test_failed_start_is_a_failed_trial_and_study_goes_on(space_dir, db_url, tmp_path):
    # An "engine" that dies at start with a memory message: every trial fails as oom.
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('out of memory', flush=True)\nsys.exit(1)\n")
    space = _space(space_dir, trials=3)
    job_id = run_fake_job(db_url, space, space_dir / "work", [sys.executable, str(crash)])
    with Store(db_url).session() as s:
        rows = s.query(TrialModel).filter_by(job_id=job_id).all()
        assert len(rows) == 3
        assert {r.fail_reason for r in rows} <= {"oom", "invalid_config"}
        assert any(r.fail_reason == "oom" and "out of memory" in r.fail_detail for r in rows)
        assert s.get(JobModel, job_id).state == "succeeded"
    assert cli.main(["export", str(job_id), "--db", db_url]) == cli.EXIT_INFEASIBLE


def test_tight_slo_makes_points_infeasible_and_re_evaluation_relaxes_it(
    space_dir, db_url, fake_launcher
):
    space = _space(space_dir, slo=0.0001, trials=3)
    job_id = run_fake_job(db_url, space, space_dir / "work", fake_launcher)
    rep = job_report(Store(db_url), job_id)
    assert rep.points and not rep.front and rep.winner is None
    assert all("p99_tpot_ms" in p.violations[0] for p in rep.points)
    relaxed = job_report(Store(db_url), job_id, slo={"p99_tpot_ms": 1e6})
    assert relaxed.winner is not None
    # the CLI re-evaluates the same way, without re-running anything
    assert cli.main(["export", str(job_id), "--db", db_url]) == cli.EXIT_INFEASIBLE
    args = ["export", str(job_id), "--db", db_url, "--slo-p99-tpot-ms", "1000000"]
    assert cli.main(args) == cli.EXIT_OK
    assert cli.main([*args, "--concurrency", "3"]) == cli.EXIT_INFEASIBLE  # not measured


def test_unknown_job(db_url, capsys):
    assert cli.main(["trials", "999", "--db", db_url]) == cli.EXIT_INPUT
    assert "job 999 not found" in capsys.readouterr().err


def test_cancel_between_trials_keeps_finished_trials(space_dir, db_url, fake_launcher):
    from tuner.job import JobControl

    control = JobControl()
    job_id = create_job(Store(db_url), _space(space_dir, trials=6))

    def after(ev):
        if ev.number == 1:
            control.cancel()

    run_job(
        Store(db_url),
        job_id,
        work_dir=space_dir / "w",
        on_trial=after,
        measurers=fake_measurers(fake_launcher),
        control=control,
    )
    with Store(db_url).session() as s:
        assert s.get(JobModel, job_id).state == "cancelled"
        rows = s.query(TrialModel).filter_by(job_id=job_id).all()
        assert [r.state for r in rows] == ["complete", "complete"]


def test_cancel_stops_the_running_engine(space_dir, db_url, fake_launcher):
    import threading
    import time

    from tuner.job import JobControl

    control = JobControl()
    text = SPACE.format(
        drafts="good_draft", slo=1000, trials=3, confirm=2, search="guided"
    ).replace("max_tokens: 12", "max_tokens: 400")
    space = loads_space(text, base_dir=space_dir)
    job_id = create_job(Store(db_url), space)
    launcher = [*fake_launcher]
    t0 = time.monotonic()
    threading.Timer(4.0, control.cancel).start()
    run_job(
        Store(db_url),
        job_id,
        work_dir=space_dir / "w",
        measurers=fake_measurers(launcher),
        control=control,
    )
    assert time.monotonic() - t0 < 30
    with Store(db_url).session() as s:
        assert s.get(JobModel, job_id).state == "cancelled"
        rows = s.query(TrialModel).filter_by(job_id=job_id).all()
        assert rows[-1].state == "fail" and rows[-1].fail_reason == "cancelled"


def test_job_left_running_by_a_dead_worker_resumes(space_dir, db_url, fake_launcher):
    job_id = create_job(Store(db_url), _space(space_dir, trials=3))
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    orphan = study.ask()  # a trial the dead worker had started
    with Store(db_url).session() as s:
        s.get(JobModel, job_id).state = "running"
        s.add(
            TrialModel(
                job_id=job_id,
                number=orphan.number,
                state="running",
                method="none",
                params={"method": "none"},
                engine_config={},
                engine_key="x",
            )
        )
    fast = WorkerContext(heartbeat_s=1, grace_s=2, poll_s=0.2)  # the orphan is lost after 2 s
    run_job(
        Store(db_url),
        job_id,
        work_dir=space_dir / "w",
        measurers=fake_measurers(fake_launcher),
        worker=fast,
    )
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    states = [t.state.name for t in study.trials]
    # the lost trial is failed and run once more: the budget still buys 3 measured trials
    assert states[0] == "FAIL" and states.count("COMPLETE") == 3 and len(states) == 4
    assert [t.system_attrs.get("failed_trial") for t in study.trials].count(0) == 1
    with Store(db_url).session() as s:
        assert s.get(JobModel, job_id).state == "succeeded"
        r0 = s.query(TrialModel).filter_by(job_id=job_id, number=0).one()
        assert r0.state == "fail" and r0.fail_reason == "interrupted"


def test_lossless_guard_flags_configs_whose_greedy_output_drifts(space_dir, db_url, fake_launcher):
    # Noise is not under test here: on a loaded machine the FAKE's tiny runs can look noisy,
    # which would keep the baseline off the front for an unrelated reason.
    text = SPACE.format(
        drafts="good_draft", slo=1000, trials=3, confirm=0, search="guided"
    ).replace("{confirm_top: 0}", "{confirm_top: 0, max_relative_mad: 10}")
    job_id = create_job(Store(db_url), loads_space(text, base_dir=space_dir))
    # --fake-lossy on the launcher, not in engine.extra_args: a space may pass only the
    # engine's allow-listed flags (tests/engines/test_engine_args.py).
    lossy = [*fake_launcher, "--fake-lossy"]
    run_job(Store(db_url), job_id, work_dir=space_dir / "w", measurers=fake_measurers(lossy))
    with Store(db_url).session() as s:
        rows = s.query(TrialModel).filter_by(job_id=job_id).order_by(TrialModel.number).all()
        base, spec = rows[0], [r for r in rows if r.method != "none" and r.state == "complete"]
        assert base.greedy_token_ids and base.lossless_match_rate is None  # the reference
        assert spec and all(r.lossless_match_rate == 0.5 for r in spec)
    rep = job_report(Store(db_url), job_id)
    flagged = [p for p in rep.points if p.method != "none"]
    assert flagged and all(
        not p.feasible and "greedy match 50%" in p.violations[-1] for p in flagged
    )
    assert rep.winner is not None and rep.winner.method == "none"


def test_an_over_budget_candidate_costs_no_launch_in_a_job(tmp_path, db_url, fake_launcher):
    """The whole space asks for 32k-token contexts on a small fraction: every speculative
    candidate and the baseline are refused in pre-flight and the engine never starts."""
    text = f"""
name: too-big
engine: {{model: {TINY / "target"}, served_model_name: fake, max_model_len: 262144}}
methods: {{ngram: {{num_speculative_tokens: {{min: 1, max: 2}}}}}}
max_num_seqs: [256]
memory_fraction: [0.01]
concurrency: [1]
trials: 2
"""
    job_id = run_fake_job(
        db_url, loads_space(text, base_dir=tmp_path), tmp_path / "w", fake_launcher
    )
    with Store(db_url).session() as s:
        rows = s.query(TrialModel).filter_by(job_id=job_id).all()
        assert len(rows) == 2
        assert all(r.state == "fail" and r.fail_reason == "invalid_config" for r in rows)
        assert all("pre-flight: memory_fraction: 0.01 of" in r.fail_detail for r in rows)
        assert s.get(JobModel, job_id).engine_launches == 0
