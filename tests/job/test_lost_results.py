"""A result stored by a worker that then stopped before telling Optuna: Optuna fails the
trial as stale and only afterwards calls the callback that queues its retry, and the worker
that declared it lost may die in between. The job's owner settles every such trial itself,
once, whoever failed it (``Recovery.settle``); a helper leaves stored results to the owner.
Replay jobs on a real database: no engine, seconds."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest

from tests.job.test_shared_job import FAST, _run
from tuner.context import JobContext, JobControl
from tuner.recovery import Recovery
from tuner.storage import Store

pytestmark = pytest.mark.timeout(120)

FAIL = optuna.trial.TrialState.FAIL
WAITING = optuna.trial.TrialState.WAITING


def _recovery(store: Store, job_id: int, *, owner: bool) -> Recovery:
    space = store.space(job_id)
    ctx = JobContext(store, job_id, space, 2, Path("unused"), JobControl(), FAST, owner=owner)
    return Recovery(ctx)


def _lost_after_storing(store: Store, job_id: int, *, stored: bool) -> int:
    """A trial whose worker added its row (and, with ``stored``, stored its result), then
    stopped; Optuna failed it as stale and nothing queued its retry. Its number."""
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
    assert storage.set_trial_state_values(tid, FAIL)  # Optuna's stale check, callback not run
    return number


def _retries(store: Store, job_id: int, number: int) -> list[optuna.trial.FrozenTrial]:
    study = store.load_study(job_id)
    return [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == number]


def test_the_owner_tells_a_stored_result_nobody_retried_once(tmp_path, db_url):
    store, job_id = _run(tmp_path, db_url, trials=2)
    n = _lost_after_storing(store, job_id, stored=True)
    owner = _recovery(store, job_id, owner=True)
    study = store.load_study(job_id, storage=owner.storage)
    assert not owner.settle(study)  # settled at once: the row holds a result
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
    store.fail_orphaned_trials(job_id, [n], detail="crashed")
    owner = _recovery(store, job_id, owner=True)
    assert not owner.settle(store.load_study(job_id, storage=owner.storage))
    assert _retries(store, job_id, n) == []
