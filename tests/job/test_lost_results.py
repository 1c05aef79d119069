"""A result stored by a worker that then stopped before telling Optuna: Optuna fails the
trial as stale and only afterwards calls the callback that queues its retry, and the worker
that declared it lost may die in between. The job's owner settles every such trial itself,
once, whoever failed it (``Recovery.settle``); a helper leaves stored results to the owner.
Replay jobs on a real database: no engine, seconds."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.job.test_shared_job import FAST, _run, _space
from tuner.context import JobContext, JobControl
from tuner.job import JobCancelled, _set_up, create_job, default_measurer, run_job
from tuner.measure import load_all_prompts
from tuner.recovery import MAX_RETRY, NOT_RUN_ATTR, EndedJobSweep, Recovery, slots_used
from tuner.storage import JobModel, Store, retried_number, utcnow
from tuner.storage._db import session_scope
from tuner.worker import Worker

pytestmark = pytest.mark.timeout(120)

FAIL = optuna.trial.TrialState.FAIL
WAITING = optuna.trial.TrialState.WAITING


def _recovery(store: Store, job_id: int, *, owner: bool) -> Recovery:
    space = store.space(job_id)
    ctx = JobContext(store, job_id, space, 2, Path("unused"), JobControl(), FAST, owner=owner)
    return Recovery(ctx)


def _lost_after_storing(
    store: Store, job_id: int, *, stored: bool, failed_in_optuna: bool = True
) -> int:
    """A trial whose worker added its row (and, with ``stored``, stored its result), then
    stopped; Optuna failed it as stale (unless not ``failed_in_optuna``: left running) and
    nothing queued its retry. Its number."""
    storage = store.optuna_storage()
    study_id = storage.get_study_id_from_name(f"spectune-job-{job_id}")
    tid = storage.create_new_trial(study_id)
    number = storage.get_trial_number_from_id(tid)
    done = store.trial(job_id, 0)
    row = store.add_trial(
        job_id, number, method=done.method, params=done.params, engine_config={}, engine_key="x"
    )
    if stored:
        points = [dict(m.metrics) for m in done.measurements]
        assert store.store_results(row, points, {}, state="complete")
    if failed_in_optuna:  # Optuna's stale check, callback not run
        assert storage.set_trial_state_values(tid, FAIL)
    return number


def _retries(store: Store, job_id: int, number: int) -> list[optuna.trial.FrozenTrial]:
    study = store.load_study(job_id)
    return [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == number]


def test_the_owner_tells_a_stored_result_nobody_retried_once(tmp_path, db_url):
    store, job_id = _run(tmp_path, db_url, trials=2)
    n = _lost_after_storing(store, job_id, stored=True)
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    assert owner.settle(study)  # queued at once (the row holds a result): told next loop
    (retry,) = _retries(store, job_id, n)
    assert retry.state == WAITING
    owner.settle(study)
    _recovery(store, job_id, owner=True).settle(store.load_study(job_id))  # a new owner too
    assert len(_retries(store, job_id, n)) == 1  # told once
    assert store.trial(job_id, n).state == "complete"  # the stored result stands


def test_a_helper_leaves_a_stored_result_to_the_owner(tmp_path, db_url):
    store, job_id = _run(tmp_path, db_url, trials=2)
    n = _lost_after_storing(store, job_id, stored=True)
    helper = _recovery(store, job_id, owner=False)
    study = store.load_study(job_id, storage=helper.storage)
    assert not helper._retry(study, study.trials[n], "its worker stopped beating")
    assert _retries(store, job_id, n) == []
    assert store.trial(job_id, n).state == "complete"


def test_a_row_left_running_is_failed_and_retried_after_the_grace(tmp_path, db_url):
    """The worker that failed the trial in Optuna died before failing its row: the owner
    waits ``grace_s`` (that worker may still be at it), then does both itself."""
    store, job_id = _run(tmp_path, db_url, trials=2)
    n = _lost_after_storing(store, job_id, stored=False)
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    assert owner.settle(study)  # unsettled: the job may not end yet
    assert _retries(store, job_id, n) == [] and store.trial(job_id, n).state == "running"
    time.sleep(FAST.grace_s + 0.1)
    assert not owner.settle(study)
    assert store.trial(job_id, n).state == "fail"
    assert store.trial(job_id, n).fail_reason == "interrupted"
    assert len(_retries(store, job_id, n)) == 1  # it will be measured, in a slot


def test_a_failure_stored_as_such_is_not_retried(tmp_path, db_url):
    store, job_id = _run(tmp_path, db_url, trials=2)
    n = _lost_after_storing(store, job_id, stored=False)
    store.finish_trial(store.trial(job_id, n).trial_id, "fail", reason="crash", detail="x")
    owner = _recovery(store, job_id, owner=True)
    assert not owner.settle(store.load_study(job_id, storage=owner.storage))
    assert _retries(store, job_id, n) == []


@pytest.mark.parametrize("row", ["interrupted", "none"])
def test_a_lost_trial_whose_retry_was_not_queued_is_retried_after_the_grace(tmp_path, db_url, row):
    """The worker that declared it lost failed it in Optuna (and its row), then died before
    queuing its retry (or the job's end came in between, soak job 108): the owner waits
    ``grace_s`` for the retry to show, then queues it itself, once."""
    store, job_id = _run(tmp_path, db_url, trials=2)
    if row == "none":
        storage = store.optuna_storage()
        tid = storage.create_new_trial(storage.get_study_id_from_name(f"spectune-job-{job_id}"))
        assert storage.set_trial_state_values(tid, FAIL)
        n = storage.get_trial_number_from_id(tid)
    else:
        n = _lost_after_storing(store, job_id, stored=False)
        store.fail_orphaned_trials(job_id, [n], detail="its worker stopped beating")
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    assert owner.settle(study) and _retries(store, job_id, n) == []
    time.sleep(FAST.grace_s + 0.1)
    assert not owner.settle(study)
    assert len(_retries(store, job_id, n)) == 1
    assert not owner.settle(study) and len(_retries(store, job_id, n)) == 1


def _running_trial(store: Store, job_id: int) -> int:
    """A trial running in Optuna and in SpecTune, as a worker killed mid-trial leaves it."""
    storage = store.optuna_storage()
    tid = storage.create_new_trial(storage.get_study_id_from_name(f"spectune-job-{job_id}"))
    number = storage.get_trial_number_from_id(tid)
    store.add_trial(job_id, number, method="none", params={}, engine_config={}, engine_key="y")
    return number


def test_trials_left_running_in_an_ended_job_are_failed_by_an_idle_worker(tmp_path, db_url):
    store, ended = _run(tmp_path, db_url, trials=2)
    lost = _running_trial(store, ended)  # its worker was killed after the job ended
    live = create_job(store, store.space(ended))
    store.claim_next("w")
    running = _running_trial(store, live)  # a running job's trial: not the sweep's
    sweep = EndedJobSweep(store, grace_s=30, every_s=0)
    assert sweep() == []  # the job ended under grace_s ago: its workers may still end it
    with session_scope(db_url) as s:
        s.get(JobModel, ended).finished_at = utcnow() - timedelta(seconds=60)
    assert sweep() == [ended]
    assert store.load_study(ended).trials[lost].state == FAIL
    row = store.trial(ended, lost)
    assert row.state == "fail" and row.fail_reason == "interrupted"
    assert "job ended" in row.fail_detail
    assert store.load_study(live).trials[running].state == optuna.trial.TrialState.RUNNING
    assert store.trial(live, running).state == "running"
    assert sweep() == []  # nothing left


def test_a_stored_result_left_running_in_an_ended_job_is_told_its_values(tmp_path, db_url):
    """Soak jobs 613 and 1018 (cancelled): a helper stored its result, then stalled before
    telling Optuna; the job ended, and the sweep failed the trial in Optuna beside a stored
    result, with no retry to tell it (none runs in an ended job). The sweep now tells
    Optuna the stored values; a trial with nothing stored still fails."""
    store, ended = _run(tmp_path, db_url, trials=2)
    stored = _lost_after_storing(store, ended, stored=True, failed_in_optuna=False)
    empty = _running_trial(store, ended)
    with session_scope(db_url) as s:
        s.get(JobModel, ended).finished_at = utcnow() - timedelta(seconds=60)
    assert EndedJobSweep(store, grace_s=30, every_s=0)() == [ended]
    trials = store.load_study(ended).trials
    assert trials[stored].state == optuna.trial.TrialState.COMPLETE
    assert trials[stored].values == trials[0].values  # the stored result's own values
    assert store.trial(ended, stored).state == "complete"
    assert trials[empty].state == FAIL and store.trial(ended, empty).state == "fail"


def test_a_sweep_waits_its_interval():
    class Store_:
        url = "sqlite://"

        def optuna_storage(self) -> None:
            raise AssertionError("read within every_s")

    sweep = EndedJobSweep(Store_(), grace_s=60)  # type: ignore[arg-type]
    sweep._last = time.monotonic()
    assert sweep() == []


def test_a_cancel_requested_before_the_end_wins(tmp_path, db_url):
    """Requested after the last trial, before the owner's heartbeat brought it (a helper
    that saw it first cut its trial short, soak job 40): the job ends cancelled, not
    succeeded one trial short."""
    store = Store(db_url)
    job_id = create_job(store, _space(tmp_path, trials=2))
    measured: list[int] = []

    def cancelled_after_the_last(ctx: JobContext, prompts: Any) -> Any:
        m = default_measurer(ctx, prompts)
        measure = m.measure

        def then_cancel(*a: Any, **kw: Any) -> Any:
            got = measure(*a, **kw)
            measured.append(1)
            if len(measured) == 2:
                assert store.request_cancel(job_id)
            return got

        m.measure = then_cancel  # type: ignore[method-assign]
        return m

    try:
        run_job(
            store, job_id, work_dir=tmp_path / "w", worker=FAST, measurers=cancelled_after_the_last
        )
    except JobCancelled:
        pass
    assert len(measured) >= 2
    assert store.job(job_id).state == "cancelled"


def test_an_idle_worker_sweeps_ended_jobs(tmp_path, db_url):
    store, ended = _run(tmp_path, db_url, trials=2)
    lost = _running_trial(store, ended)
    with session_scope(db_url) as s:
        s.get(JobModel, ended).finished_at = utcnow() - timedelta(seconds=60)
    worker = Worker(store, work_dir=tmp_path / "w", poll_s=0.1, heartbeat_s=0.5, stale_after_s=2)
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while store.trial(ended, lost).state == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.stop()
    assert store.trial(ended, lost).state == "fail"
    assert store.load_study(ended).trials[lost].state == FAIL


def test_a_late_callback_does_not_queue_a_second_retry(tmp_path, db_url):
    """The worker that failed the trial in Optuna stalled past ``grace_s`` before its
    callback ran; the owner queued the retry meanwhile: the callback queues none."""
    store, job_id = _run(tmp_path, db_url, trials=2)
    n = _lost_after_storing(store, job_id, stored=False)
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    assert owner.settle(study)
    time.sleep(FAST.grace_s + 0.1)
    assert not owner.settle(study) and len(_retries(store, job_id, n)) == 1
    helper = _recovery(store, job_id, owner=False)
    late = store.load_study(job_id, storage=helper.storage)
    slots = store.trial_slots_left(job_id)
    # past its row checks when it stalled (row=False: they are behind it)
    assert not helper._retry(late, late.trials[n], "its worker stopped beating", row=False)
    assert len(_retries(store, job_id, n)) == 1
    assert store.trial_slots_left(job_id) == slots  # no second slot given back


def test_a_stored_result_is_told_though_a_launching_trial_waits_ahead_of_it(tmp_path, db_url):
    """Soak job 152: the search had closed on its outlook with an enqueued neighbour left
    waiting; ``ask`` takes the oldest waiting trial, so the stored result's retry behind it
    was never run and its values never told. The owner runs that retry itself."""
    store, job_id = _run(tmp_path, db_url, trials=2)
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    study.enqueue_trial(dict(study.trials[1].params))  # a neighbour that would launch
    ahead = study.get_trials(states=(WAITING,))[0].number
    n = _lost_after_storing(store, job_id, stored=True)
    assert owner.settle(study)
    ran: list[int] = []

    def objective(trial: optuna.Trial) -> list[float]:
        ran.append(trial.number)
        return list(study.trials[0].values)

    assert owner.tell_stored(study, objective)
    (retry,) = _retries(store, job_id, n)
    assert ran == [retry.number] and retry.state == optuna.trial.TrialState.COMPLETE
    assert study.trials[ahead].state == WAITING  # the launching one was not run
    assert not owner.tell_stored(study, objective) and ran == [retry.number]


def test_a_retry_the_closed_search_will_not_run_is_failed_with_why(tmp_path, db_url):
    """Soak job 122: a lost trial's retry queued after the search closed on its outlook was
    left waiting for ever. At the job's end the owner fails it, saying why; an enqueued
    trial stays waiting, and a stored result's retry is never dropped (it is told)."""
    store, job_id = _run(tmp_path, db_url, trials=2)
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    study.enqueue_trial(dict(study.trials[1].params))
    queued = study.get_trials(states=(WAITING,))[0].number
    storage = store.optuna_storage()
    tid = storage.create_new_trial(storage.get_study_id_from_name(f"spectune-job-{job_id}"))
    assert storage.set_trial_state_values(tid, FAIL)
    lost = storage.get_trial_number_from_id(tid)
    assert owner._retry(study, study.trials[lost], "its worker stopped", row=False)
    stored = _lost_after_storing(store, job_id, stored=True)
    owner.settle(study)
    (retry,) = _retries(store, job_id, lost)
    assert owner.drop_retries(study, "the search had closed: nothing left can win") == [
        retry.number
    ]
    dropped = study.trials[retry.number]
    assert dropped.state == FAIL
    assert dropped.system_attrs[NOT_RUN_ATTR] == "the search had closed: nothing left can win"
    assert study.trials[queued].state == WAITING
    (told,) = _retries(store, job_id, stored)
    assert told.state == WAITING  # left for tell_stored
    assert owner.drop_retries(study, "again") == []


def test_a_retry_tells_its_own_trials_values_not_another_run_of_the_configuration(
    tmp_path, db_url
):
    """Soak jobs 213 and 56: the lost trial's configuration was also run by a later trial
    (213), or the lost trial had itself reused an earlier run (56); its retry told that other
    run. A retry now finds the trial it runs again first, when its result is stored."""
    store, job_id = _run(tmp_path, db_url, trials=2)
    n = _lost_after_storing(store, job_id, stored=True)
    done = store.trial(job_id, 0)
    later = store.add_trial(
        job_id, n + 1, method=done.method, params=done.params, engine_config={}, engine_key="x"
    )
    other = [{**dict(m.metrics), "output_tok_per_s": 1.0} for m in done.measurements]
    assert store.store_results(later, other, {}, state="complete")
    assert store.previous_run(job_id, "x", n + 2).number == n + 1  # the last run, as before
    own = store.previous_run(job_id, "x", n + 2, retried=n)
    assert own.number == n
    assert (
        own.measurements[0].metrics["output_tok_per_s"]
        == (done.measurements[0].metrics["output_tok_per_s"])
    )
    # The lost trial's own row stored nothing (or another configuration): the last run.
    assert store.previous_run(job_id, "y", n + 2, retried=n) is None


def test_a_trial_asked_after_its_job_ended_is_failed_saying_it_never_ran(tmp_path, db_url):
    """Soak job 423: a helper stalled between taking its slot and asking came back after the
    owner had given the slot back and ended the job; it asked a trial, saw the job's end and
    failed it before its row: a trial neither run nor said not to have run. Now it says why."""
    store, job_id = _run(tmp_path, db_url, trials=2)
    space = store.space(job_id)
    control = JobControl()
    control.cancel()  # what the helper's heartbeat makes of the job's end
    ctx = JobContext(store, job_id, space, 2, tmp_path / "helper", control, FAST, owner=False)
    study, recovery, runner = _set_up(ctx, load_all_prompts(space), None)
    rows = {r.number for r in store.trials(job_id)}
    with pytest.raises(JobCancelled):
        recovery.run_one(study, runner)
    asked = store.load_study(job_id).get_trials()[-1]
    assert asked.state == FAIL and asked.number not in rows
    assert asked.system_attrs[NOT_RUN_ATTR] == "its job had ended or was cancelled first"
    assert {r.number for r in store.trials(job_id)} == rows  # no row: nothing ran
    assert runner.interrupted == []  # not put back for a retry either


def test_a_retry_lost_again_runs_again_until_max_retry(tmp_path, db_url):
    """A worker's death is not the trial's fault: a retry lost again is run again, up to
    ``MAX_RETRY`` runs after the first (the soak lost about two retries an hour again, each
    then a lost trial). The chain takes one slot; each retry names the run it repeats, so
    none is retried twice, and a trial lost at every run stays failed."""
    assert MAX_RETRY >= 2  # one retry: a retry lost again was a lost trial
    store, job_id = _run(tmp_path, db_url, trials=2)
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    storage = owner.storage
    before = slots_used(study)
    queued = {t.number for t in study.get_trials(states=(WAITING,))}  # the job's own
    tid = storage.create_new_trial(storage.get_study_id_from_name(f"spectune-job-{job_id}"))
    assert storage.set_trial_state_values(tid, FAIL)
    chain = [storage.get_trial_number_from_id(tid)]
    for _ in range(MAX_RETRY):
        assert owner._retry(study, study.trials[chain[-1]], "its worker stopped", row=False)
        assert not owner._retry(study, study.trials[chain[-1]], "again", row=False)  # once
        (retry,) = [t for t in study.get_trials(states=(WAITING,)) if t.number not in queued]
        assert retried_number(retry) == chain[-1]
        assert owner._claim(retry) and storage.set_trial_state_values(retry._trial_id, FAIL)
        chain.append(retry.number)
    assert not owner._retry(study, study.trials[chain[-1]], "its worker stopped", row=False)
    assert not owner.settle(study)  # nothing left unsettled, nothing queued
    assert {t.number for t in study.get_trials(states=(WAITING,))} == queued
    assert slots_used(study) == before + 1


def test_a_tell_that_finds_its_trial_failed_meanwhile_does_not_fail_the_job(
    tmp_path, db_url, monkeypatch
):
    """Soak job 956: the owner stalled mid-trial, a helper failed the trial as lost, and the
    owner's tell (retried through a database restart) found it failed: Optuna's
    ``skip_if_finished`` had read the trial running, the write was refused, and the job
    failed. The trial stays failed (its retry measures it again, or tells a stored result)
    and the job goes on."""
    store, job_id = _run(tmp_path, db_url, trials=2)
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    elsewhere = store.optuna_storage()  # another worker's
    write = owner.storage.set_trial_state_values

    def failed_between_check_and_write(trial_id: int, state: Any, values: Any = None) -> bool:
        if state != FAIL:
            assert elsewhere.set_trial_state_values(trial_id, FAIL)
        return write(trial_id, state, values)

    monkeypatch.setattr(owner.storage, "set_trial_state_values", failed_between_check_and_write)
    owner.run_one(study, lambda trial: list(study.trials[0].values))
    assert store.load_study(job_id).get_trials()[-1].state == FAIL
