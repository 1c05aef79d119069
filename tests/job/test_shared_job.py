"""Workers sharing one job (replay jobs: no engine, seconds): a helper of a job seeded at the
largest seed, a worker backing off a job it cannot join, a dead worker's engine stopped by a
live worker without a restart, and the narrow windows a dead worker leaves, each made to
happen on purpose (a worker "dies" at one point of ``Recovery.run_one``) rather than raced
with ``kill -9``."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest

from tests.helpers import trial_records
from tests.surface.fake_surface import SPACE, write_fake_surface
from tuner.context import JobContext, WorkerContext
from tuner.job import create_job, default_measurer, run_job
from tuner.measure import Measurer
from tuner.pareto import job_report
from tuner.recovery import Recovery, trial_heartbeat
from tuner.space import SearchSpace, loads_space
from tuner.storage import Store
from tuner.worker import Worker
from tuner.workloads import Prompt

pytestmark = pytest.mark.timeout(120)

# A short grace: trials (and slots) of the dead worker are taken back after it.
FAST = WorkerContext(worker_id="owner", heartbeat_s=0.2, grace_s=1.0, poll_s=0.1)


def _space(tmp_path: Path, **over: Any) -> SearchSpace:
    surface = write_fake_surface(tmp_path / "fake.jsonl")
    text = SPACE.replace(
        "engine: {model: target, served_model_name: fake}",
        f"engine: {{kind: replay, surface: {surface}, model: target, served_model_name: fake}}",
    )
    data = loads_space(text, base_dir=tmp_path).model_dump(mode="json")
    data.update(over)
    return loads_space(json.dumps(data), base_dir=tmp_path)


def _slow_replay(ctx: JobContext, prompts: dict[str, list[Prompt]]) -> Measurer:
    """The replay measurer, 0.3 s a trial: long enough for a second worker to join."""
    m = default_measurer(ctx, prompts)
    measure = m.measure

    def slow(*a: Any, **kw: Any) -> Any:
        time.sleep(0.3)
        return measure(*a, **kw)

    m.measure = slow  # type: ignore[method-assign]
    return m


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def _worker(url: str, tmp_path: Path, name: str) -> Worker:
    return Worker(
        Store(url),
        work_dir=tmp_path / "work",
        worker_id=name,
        poll_s=0.1,
        heartbeat_s=0.3,
        stale_after_s=5.0,
        measurers=_slow_replay,
    )


def test_a_helper_joins_a_job_seeded_at_the_largest_seed(tmp_path, db_url, caplog):
    caplog.set_level(logging.INFO)
    store = Store(db_url)
    job_id = create_job(store, _space(tmp_path, seed=4294967295, trials=10))  # 2**32 - 1
    store.release_to_workers(job_id, key=None, digest="test")
    a, b = _worker(db_url, tmp_path, "A"), _worker(db_url, tmp_path, "B")
    a.start()
    try:
        _wait(lambda: store.trials(job_id), 30, "the owner's first trial")
        b.start()
        _wait(lambda: store.job(job_id).state == "succeeded", 60, "the job to end")
    finally:
        a.stop()
        b.stop()
    rows = store.trials(job_id)
    assert {r.worker_id for r in rows} == {"A", "B"}  # the helper ran trials
    assert len(rows) == 10
    failures = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert failures == [], [r.getMessage() for r in failures]


def _joinable(store: Store, tmp_path: Path) -> int:
    """A running job whose (live) owner has started it: what a helper joins."""
    job_id = create_job(store, _space(tmp_path, trials=5))
    store.release_to_workers(job_id, key=None, digest="test")
    assert store.claim_next("owner", stale_after_s=600) == job_id
    store.add_trial(job_id, 0, method="none", params={}, engine_config={}, engine_key="k")
    return job_id


def test_a_worker_that_cannot_join_a_job_backs_off(tmp_path, db_url, caplog, monkeypatch):
    store = Store(db_url)
    job_id = _joinable(store, tmp_path)
    calls: list[float] = []

    def failing_join(*a: Any, join: bool = False, **kw: Any) -> None:
        calls.append(time.monotonic())
        raise ValueError("Seed must be between 0 and 2**32 - 1")

    monkeypatch.setattr("tuner.worker.run_job", failing_join)
    w = Worker(store, work_dir=tmp_path / "w", worker_id="B", poll_s=0.05, stale_after_s=600)
    w.start()
    time.sleep(3.5)
    w.stop()
    assert store.joinable_job(stale_after_s=600) == job_id  # it stayed joinable throughout
    # Tries at 0, 1 and 3 s (1 s, then twice as long each time), not hundreds.
    assert 2 <= len(calls) <= 4, len(calls)
    assert all(b - a >= 0.9 for a, b in zip(calls, calls[1:], strict=False))
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1  # the first failure's; the next ones are one line each
    assert "failed again (2 in a row" in caplog.text


def test_a_worker_whose_claim_fails_backs_off(tmp_path, db_url, caplog, monkeypatch):
    store = Store(db_url)
    store.ensure_schema()
    calls: list[float] = []

    def failing_claim(*a: Any, **kw: Any) -> None:
        calls.append(time.monotonic())
        raise RuntimeError("claim broke")

    monkeypatch.setattr(store, "claim_next", failing_claim)
    w = Worker(store, work_dir=tmp_path / "w", worker_id="B", poll_s=0.05, stale_after_s=600)
    w.start()
    time.sleep(3.5)
    w.stop()
    assert 2 <= len(calls) <= 4, len(calls)
    assert len([r for r in caplog.records if r.exc_info]) == 1


def _orphan_engine(run: Path) -> subprocess.Popen:
    """A process group whose worker died, with its pid file: what ``kill -9`` of a worker
    leaves (the engine runs in its own session)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    group = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    run.mkdir(parents=True, exist_ok=True)
    rec = {
        "pgid": group.pid,
        "argv": ["engine"],
        "create_time": psutil.Process(group.pid).create_time(),
        "owner_pid": dead.pid,
        "owner_create_time": 0.0,
    }
    (run / f"engine-{group.pid}.json").write_text(json.dumps(rec))
    return group


def test_an_idle_worker_stops_a_dead_workers_engine(tmp_path, db_url, caplog):
    w = _worker(db_url, tmp_path, "A")
    reaps: list[list[int]] = []
    reap = w.reap

    def counted() -> list[int]:
        reaps.append(reap())
        return reaps[-1]

    w.reap = counted  # type: ignore[method-assign]
    w.start()  # reaps at start-up, then polls (nothing queued)
    try:
        _wait(lambda: reaps, 30, "the start-up reap")
        group = _orphan_engine(tmp_path / "work" / "run")  # after it: the poll loop's to stop
        try:
            _wait(lambda: group.poll() is not None, 10, "the idle worker to stop the engine")
        finally:
            group.kill()
            group.wait()
        assert w.alive  # no restart
    finally:
        w.stop()
    assert not list((tmp_path / "work" / "run").glob("*.json"))
    assert f"process group {group.pid} left by a dead worker" in caplog.text


def test_a_running_job_stops_a_dead_workers_engine_before_its_next_launch(tmp_path, db_url):
    store = Store(db_url)
    job_id = create_job(store, _space(tmp_path, trials=10))
    work = tmp_path / "w"
    job = threading.Thread(
        target=run_job,
        args=(store, job_id),
        kwargs={"work_dir": work, "worker": FAST, "measurers": _slow_replay},
    )
    job.start()
    try:
        _wait(lambda: store.trials(job_id), 30, "the first trial")
        group = _orphan_engine(work / "run")
        try:
            _wait(lambda: group.poll() is not None or not job.is_alive(), 30, "the reap")
            assert group.poll() is not None and job.is_alive()  # stopped while the job ran
        finally:
            group.kill()
            group.wait()
    finally:
        job.join(timeout=60)
    assert store.job(job_id).state == "succeeded"


class _Dies:
    """Patches ``Recovery.run_one`` so that the worker "dies" in its ``nth`` call, at
    ``where``: ``before_ask`` (a slot taken, no trial asked), ``before_row`` (a trial asked,
    no SpecTune row) or ``before_tell`` (its results stored, Optuna never told). The job
    goes on as the other workers would carry it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, where: str, nth: int = 2) -> None:
        self.where, self.nth, self.calls, self.number = where, nth, 0, None
        orig = Recovery.run_one

        def run_one(rec: Recovery, study: optuna.Study, objective: Any) -> None:
            self.calls += 1
            if self.calls != self.nth:
                return orig(rec, study, objective)
            if self.where == "before_ask":
                return None
            trial = study.ask()
            self.number = trial.number
            if self.where == "before_tell":
                with trial_heartbeat(rec.storage, trial._trial_id):
                    objective(trial)
            return None

        monkeypatch.setattr(Recovery, "run_one", run_one)


def _run(tmp_path: Path, url: str, trials: int) -> tuple[Store, int]:
    store = Store(url)
    job_id = create_job(store, _space(tmp_path, trials=trials))
    run_job(store, job_id, work_dir=tmp_path / "w", worker=FAST)
    return store, job_id


def _ran(store: Store, job_id: int) -> list[optuna.trial.FrozenTrial]:
    waiting = optuna.trial.TrialState.WAITING
    return [t for t in store.load_study(job_id).get_trials() if t.state != waiting]


def test_a_result_stored_before_optuna_was_told_reads_as_measured(tmp_path, db_url, monkeypatch):
    died = _Dies(monkeypatch, "before_tell")
    store, job_id = _run(tmp_path, db_url, trials=4)
    n = died.number
    assert store.job(job_id).state == "succeeded"
    assert _ran(store, job_id)[n].state == optuna.trial.TrialState.FAIL  # declared lost
    row = store.trial(job_id, n)
    assert row.state == "complete" and row.measurements
    rec = next(r for r in trial_records(db_url, job_id) if r["number"] == n)
    assert rec["state"] == "complete" and rec["fail_reason"] is None
    assert rec["output_tok_per_s"] == row.measurements[0].metrics["output_tok_per_s"]
    assert n in {p.trial_number for p in job_report(store, job_id).points}  # front candidate
    # It was not measured again: its retry told Optuna the stored values, with no launch.
    (retry,) = [t for t in _ran(store, job_id) if t.system_attrs.get("failed_trial") == n]
    assert retry.state == optuna.trial.TrialState.COMPLETE
    assert store.trial(job_id, retry.number).reused_from == n
    launched = [r for r in store.trials(job_id) if r.measurements and r.reused_from is None]
    assert len(launched) == 4  # the budget, each measured once
    assert len(_ran(store, job_id)) == 5  # the four and the retry that told Optuna


def test_a_retried_trial_without_a_row_reads_interrupted(tmp_path, db_url, monkeypatch):
    died = _Dies(monkeypatch, "before_row")
    store, job_id = _run(tmp_path, db_url, trials=4)
    n = died.number
    retry = next(t for t in _ran(store, job_id) if t.system_attrs.get("failed_trial") == n)
    recs = {r["number"]: r for r in trial_records(db_url, job_id)}
    assert recs[n]["state"] == "fail" and recs[n]["fail_reason"] == "interrupted"
    assert f"trial {retry.number} ran it again" in recs[n]["fail_detail"]
    assert recs[retry.number]["state"] in ("complete", "pruned")
    measured = [r for r in recs.values() if r["state"] in ("complete", "pruned")]
    assert len(measured) == 4  # the budget, in full


def test_a_slot_taken_by_a_worker_that_died_before_asking_goes_back(
    tmp_path, db_url, monkeypatch, caplog
):
    died = _Dies(monkeypatch, "before_ask")
    store, job_id = _run(tmp_path, db_url, trials=4)
    assert died.calls == 5  # the lost slot was taken again, after the grace period
    assert len(_ran(store, job_id)) == 4  # the budget, in full
    assert store.job(job_id).trials_started == 4
    recs = trial_records(db_url, job_id)
    assert sum(r["state"] in ("complete", "pruned") for r in recs) == 4
    assert "went back to the budget" in caplog.text


def test_a_live_helper_between_slot_and_ask_keeps_its_slot(tmp_path, db_url):
    store = Store(db_url)
    job_id = create_job(store, _space(tmp_path, trials=2))
    ctx = JobContext(
        store,
        job_id,
        store.space(job_id),
        2,
        tmp_path,
        None,
        FAST,  # type: ignore[arg-type]
    )
    rec = Recovery(ctx)
    study = store.load_study(job_id, storage=rec.storage)
    assert store.take_trial_slot(job_id) and store.take_trial_slot(job_id)
    study.ask()  # one worker asked; the other is about to
    assert rec.unasked_slots(study)  # the gap is seen: the owner waits
    asked = threading.Timer(0.3, study.ask)  # within the grace period
    asked.start()
    time.sleep(0.6)
    asked.join()
    assert not rec.unasked_slots(study)
    time.sleep(FAST.grace_s)
    assert not rec.unasked_slots(study)
    assert store.trial_slots_taken(job_id) == 2  # nothing given back


def test_a_worker_stalled_after_storing_goes_on_when_its_trial_was_failed(
    tmp_path, db_url, monkeypatch, caplog
):
    """Found by bench/soak.py: a worker SIGSTOPped between storing its result and telling
    Optuna came back to a trial another worker had failed as stale; the integrations' first
    Optuna write raised UpdateFinishedTrialError and took the worker's whole job down."""
    import tuner.trial as trial_mod

    orig, hit = trial_mod.on_trial_stored, []

    def stale_meanwhile(ctx: JobContext, trial: optuna.Trial, *a: Any) -> None:
        if not hit:  # the sweep of another worker, while this one was stopped
            hit.append(trial.number)
            storage = ctx.store.optuna_storage()
            storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
        orig(ctx, trial, *a)

    monkeypatch.setattr(trial_mod, "on_trial_stored", stale_meanwhile)
    caplog.set_level(logging.WARNING)
    store, job_id = _run(tmp_path, db_url, trials=4)
    (n,) = hit
    assert store.job(job_id).state == "succeeded"
    assert _ran(store, job_id)[n].state == optuna.trial.TrialState.FAIL
    row = store.trial(job_id, n)
    assert row.state == "complete" and row.measurements  # the stored result stands
    assert f"trial {n}: result stored; another worker had declared it lost" in caplog.text


def test_a_worker_stalled_before_its_first_optuna_write_leaves_no_row_running(
    tmp_path, db_url, monkeypatch
):
    """Found by bench/soak.py: a worker SIGSTOPped just after adding its trial's row came
    back to a trial failed as stale (and retried); Optuna refused its next write, the job
    thread died, and the row stayed ``running`` for ever beside a failed Optuna trial."""
    orig, hit = Store.add_trial, []

    def stale_meanwhile(store: Store, job_id: int, number: int, **kw: Any) -> int:
        trial_id = orig(store, job_id, number, **kw)
        if not hit:  # the sweep of another worker, while this one was stopped
            hit.append(number)
            t = store.load_study(job_id).trials[number]
            storage = store.optuna_storage()
            storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        return trial_id

    monkeypatch.setattr(Store, "add_trial", stale_meanwhile)
    store, job_id = _run(tmp_path, db_url, trials=4)
    (n,) = hit
    assert store.job(job_id).state == "succeeded"
    row = store.trial(job_id, n)
    assert (row.state, row.fail_reason) == ("fail", "interrupted"), row.state
    assert not row.measurements
    assert "declared lost" in row.fail_detail


def test_a_job_whose_set_up_fails_ends_failed_not_running_for_ever(tmp_path, db_url, monkeypatch):
    """Found by bench/soak.py: a database restart while a worker built the job's Optuna
    storage raised before the part of ``run_job`` that ends a job on an error; the worker
    let its claim go and the job stayed ``running`` with no owner, never to be taken."""

    def broken(*a: Any, **kw: Any) -> None:
        raise RuntimeError("storage could not be built")

    monkeypatch.setattr(Recovery, "__init__", broken)
    store = Store(db_url)
    job_id = create_job(store, _space(tmp_path, trials=2))
    with pytest.raises(RuntimeError):
        run_job(store, job_id, work_dir=tmp_path / "w", worker=FAST)
    job = store.job(job_id)
    assert job.state == "failed" and "storage could not be built" in (job.error or "")
