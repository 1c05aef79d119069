"""The machine's launch history read through the ``Store`` (on SQLite and PostgreSQL): which
earlier jobs give (same hardware fingerprint, engine kind and target, succeeded, not the job
itself, never a replay), and what the report, its JSON and the CLI say of it. Jobs and trials
are typed in with launch records of the 2-core CPU machine's sizes; no engine runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fake_space import _space, make_space_dir
from tests.pareto.test_launches import _launch
from tuner import cli
from tuner.cli._render import report_text
from tuner.explain import explain
from tuner.launches import BETWEEN, launch_record, merge_launch
from tuner.pareto import job_report
from tuner.report import ReportQuery, pareto
from tuner.space import SearchSpace
from tuner.storage import JobState, Store

HW = "Test CPU @ 2.0GHz x2 / cpu"
# Four configurations launched three times each, 5 % apart: 8 degrees of freedom a job.
CALM = {n: [v, v * 1.05, v * 0.95] for n, v in enumerate((300.0, 420.0, 500.0, 560.0))}


def _point(tps: list[float], workload: str, conc: int) -> dict[str, Any]:
    def one(v: float) -> dict[str, Any]:
        return {**_launch(v), "workload": workload, "concurrency": conc}

    m = one(tps[0])
    m["launches"] = [launch_record(m, confirm=False)]
    for v in tps[1:]:
        m = merge_launch(m, one(v))
    return m


def _job(
    store: Store,
    space: SearchSpace,
    configs: dict[int, list[float]],
    *,
    hardware: str | None = HW,
    engine: dict[str, Any] | None = None,
    state: str = JobState.SUCCEEDED,
    workload: str | None = None,
    served: dict[int, str] | None = None,
) -> int:
    """A stored job as ``tuner.job.create_job`` stores one, on ``hardware``, with a trial
    per configuration (0: the baseline) measured at both levels, then ``state``."""
    data = space.model_dump(mode="json")
    data["base_dir"] = str(space.base_dir)
    data["hardware"] = hardware
    data["engine"].update(engine or {})
    jid = store.create_job(space, data, space_yaml=None, n_trials=len(configs))
    main = store.space(jid, for_reading=True)
    model = main.resolve_model(main.engine.model)
    for n, tps in configs.items():
        method = "none" if n == 0 else "ngram"
        params = {"method": method, "max_num_seqs": 4}
        if n:
            params.update(num_speculative_tokens=n, prompt_lookup_min=1, prompt_lookup_max=4)
        tid = store.add_trial(
            jid,
            n,
            method=method,
            params=params,
            engine_config={"model": (served or {}).get(n, model)},
            engine_key=f"k{jid}-{n}",
        )
        wl = workload or space.primary_workload
        points = [_point(tps, wl, c) for c in space.concurrency]
        store.store_results(tid, points, {}, state="complete")
    if state == JobState.RUNNING:
        store.start_job(jid)
    elif state != JobState.QUEUED:
        store.end_job(jid, state, None)
    return jid


@pytest.fixture
def space(tmp_path: Path) -> SearchSpace:
    return _space(make_space_dir(tmp_path / "s"))


def test_only_succeeded_jobs_on_the_same_machine_engine_and_target_give(db_url, space):
    store = Store(db_url)
    store.ensure_schema()
    target = space.resolve_model(space.engine.model)
    # the job being reported is running (its confirmation reads every job finished so far)
    me = _job(store, space, {0: [300.0, 330.0], 1: [500.0, 540.0]}, state=JobState.RUNNING)
    same = _job(store, space, CALM, workload="chat")  # another workload: it still gives
    mixed = _job(store, space, CALM, served={2: "/elsewhere/mtp"})  # trial 2: another target
    givers = {same, mixed}
    _job(store, space, CALM, hardware="Other CPU x16 / cpu")
    _job(store, space, CALM, hardware=None)  # stored before fingerprints: never matches
    _job(store, space, CALM, engine={"kind": "sglang"})
    _job(store, space, CALM, engine={"model": "good_draft"})  # another target
    replay = _job(store, space, CALM, engine={"kind": "replay", "surface": "s.jsonl"})
    for state in (JobState.RUNNING, JobState.FAILED, JobState.CANCELLED, JobState.QUEUED):
        _job(store, space, CALM, state=state)
    got = store.launch_history(me, target=target)
    assert set(got) == givers and me not in got
    assert len(got[same]) == 4 * len(space.concurrency)
    assert {m["workload"] for m in got[same]} == {"chat"}
    assert len(got[mixed]) == 3 * len(space.concurrency)  # its trial on /elsewhere/mtp is not
    # the other target reads its own history; a replay neither gives nor takes
    assert set(store.launch_history(me, target="/elsewhere/mtp")) == {mixed}
    assert store.launch_history(replay, target=target) == {}
    assert store.launch_history(10_000, target=target) == {}
    # an ended job reads the jobs that finished before it, never itself nor later ones
    assert set(store.launch_history(mixed, target=target)) == {same}
    assert store.launch_history(same, target=target) == {}


def test_the_report_json_and_cli_say_how_much_history_went_in(db_url, space, capsys):
    store = Store(db_url)
    store.ensure_schema()
    for _ in range(3):  # 3 x 8 = 24 degrees of freedom of history, 20 of them pooled
        _job(store, space, CALM)
    me = _job(store, space, {0: [300.0, 335.0], 1: [500.0, 560.0]})
    rep = job_report(store, me)
    alone = job_report(store, me, history=False)
    sp = rep.spreads["output_tok_per_s"]
    assert (sp.df, sp.own_df, sp.history_df, sp.history_jobs) == (22, 2, 20, 3)
    assert sp.history is not None and sp.history.df == 24
    assert alone.spreads["output_tok_per_s"].df == 2
    assert alone.spreads["output_tok_per_s"].log_sd == pytest.approx(sp.own_log_sd)
    # the verdicts and intervals read it: the same speedup, a narrower interval
    v, va = (r.verdicts[1][-1] for r in (rep, alone))  # at the report's level, 2
    assert v.interval_kind == BETWEEN and v.spread is not None and v.spread.df == 22
    assert v.speedup == pytest.approx(va.speedup)
    assert v.speedup_ci95[1] - v.speedup_ci95[0] < (va.speedup_ci95[1] - va.speedup_ci95[0]) / 2
    said = "df 22: this job 2 + 20 (of 24) from 3 earlier jobs on this machine"
    assert said in report_text(rep)
    _job(store, space, CALM)  # a job that finishes later never changes this job's report
    assert job_report(store, me).spreads == rep.spreads
    assert any(said in line for line in explain(rep))
    doc = pareto(store, me, ReportQuery(workload=None, concurrency=None))
    row = next(r for r in doc.launch_spread if r.metric == "output_tok_per_s")
    assert (row.df, row.own_df, row.history_df, row.history_jobs) == (22, 2, 20, 3)
    assert row.history_available_df == 24 and row.history_pooled and row.source == said
    assert row.configurations == 2 and row.own_cv == pytest.approx(0.079, abs=1e-3)
    assert row.history_cv == pytest.approx(0.05, abs=2e-3) and row.history_p_value > 0.05
    # the CLI prints the same: the text's note and --json's rows
    capsys.readouterr()
    assert cli.main(["report", str(me), "--db", db_url]) == 0
    assert said in capsys.readouterr().out
    assert cli.main(["report", str(me), "--json", "--db", db_url]) == 0
    rows = json.loads(capsys.readouterr().out)["launch_spread"]
    got = next(r for r in rows if r["metric"] == "output_tok_per_s")
    assert {k: got[k] for k in ("df", "own_df", "history_df", "history_jobs")} == {
        "df": 22,
        "own_df": 2,
        "history_df": 20,
        "history_jobs": 3,
    }


def test_a_first_job_reports_as_before(db_url, space):
    store = Store(db_url)
    store.ensure_schema()
    _job(store, space, CALM, hardware="Other CPU x16 / cpu")  # another machine's history
    me = _job(store, space, {0: [300.0, 335.0], 1: [500.0, 560.0]})
    _job(store, space, CALM)  # this machine's next job: after this one, so not its history
    rep = job_report(store, me)
    assert rep.spreads == job_report(store, me, history=False).spreads
    sp = rep.spreads["output_tok_per_s"]
    assert sp.history is None and sp.history_df == 0 and sp.own_df == sp.df == 2
    assert "job's between-launch spread: 8%, pooled over 2 configuration(s)" in report_text(rep)
    row = pareto(store, me, ReportQuery(None, None)).launch_spread[0]
    assert row.history_jobs == row.history_df == 0 and row.own_df == row.df
    assert row.source is None and not row.history_pooled and row.history_cv is None


def test_a_job_with_nothing_launched_twice_takes_the_machines_spread(db_url, space):
    store = Store(db_url)
    store.ensure_schema()
    for _ in range(2):
        _job(store, space, CALM)
    me = _job(store, space, {0: [300.0], 1: [520.0]})  # confirmation off: one launch each
    assert job_report(store, me, history=False).spreads == {}
    rep = job_report(store, me)
    sp = rep.spreads["output_tok_per_s"]
    assert (sp.df, sp.own_df, sp.history_jobs, sp.configurations) == (16, 0, 2, 0)
    spec = next(p for p in rep.points if p.trial_number == 1)
    assert rep.interval(spec, "output_tok_per_s")[2] == BETWEEN
    assert rep.verdicts[1][0].interval_kind == BETWEEN and rep.verdicts[1][0].state == "pays"
    said = "df 16, all from 2 earlier jobs on this machine: this job launched nothing twice"
    assert said in report_text(rep)
    assert not any("Nothing was launched twice" in line for line in explain(rep))


def test_a_job_noisier_than_its_history_keeps_its_own_spread(db_url, space):
    store = Store(db_url)
    store.ensure_schema()
    quiet = {n: [v[0], v[0] * 1.005, v[0] * 0.995] for n, v in CALM.items()}  # 0.5 %
    for _ in range(2):
        _job(store, space, quiet)
    me = _job(store, space, {0: [300.0, 390.0], 1: [500.0, 640.0]})  # ~25 % today
    rep = job_report(store, me)
    sp = rep.spreads["output_tok_per_s"]
    assert sp.history_refused and sp.df == 2 and sp.history_p < 0.05
    assert sp.log_sd == job_report(store, me, history=False).spreads["output_tok_per_s"].log_sd
    assert "not pooled" in report_text(rep)
    row = next(
        r
        for r in pareto(store, me, ReportQuery(None, None)).launch_spread
        if r.metric == "output_tok_per_s"
    )
    assert not row.history_pooled and row.history_jobs == 0 and row.history_cv is not None
    assert row.history_p_value is not None and row.history_p_value < 0.05
