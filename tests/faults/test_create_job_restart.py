"""A submission meeting a database restart (bench/soak.py: a 503 on ``POST /api/jobs``):
whichever step the restart meets (the schema check, the job's row, its study), the step runs
again, nothing is made twice, and the job stands."""

from __future__ import annotations

from typing import Any

import optuna
from sqlalchemy import event, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from tests.job.test_shared_job import _space
from tuner.job import create_job
from tuner.storage import JobModel, Store
from tuner.storage import _store as store_module


def _lost() -> OperationalError:
    return OperationalError("INSERT", {}, Exception("server closed the connection"))


def test_a_study_whose_answer_was_lost_is_made_once(pg_url, tmp_path, monkeypatch):
    real, calls = optuna.create_study, []

    def applied_then_lost(**kw: Any) -> optuna.Study:
        calls.append(kw["study_name"])
        study = real(**kw)
        if len(calls) == 1:
            raise _lost()  # made, but the answer never came back
        return study

    monkeypatch.setattr(optuna, "create_study", applied_then_lost)
    store = Store(pg_url)
    job_id = create_job(store, _space(tmp_path))
    assert calls == [f"spectune-job-{job_id}"] * 2
    assert optuna.get_all_study_names(storage=pg_url) == [f"spectune-job-{job_id}"]
    assert store.job(job_id).state == "queued"
    assert store.load_study(job_id).trials is not None


def test_a_job_row_whose_commit_answer_was_lost_is_made_once(pg_url, tmp_path):
    """The row's commit applied, then the connection dropped before its answer: the try
    again finds the row by the call's token instead of adding a second job."""
    armed, lost = [False], []

    def note_new_job(session: Session, _ctx: object) -> None:
        armed[0] = armed[0] or any(isinstance(o, JobModel) for o in session.new)

    def lose_the_answer(_session: Session) -> None:
        if armed[0] and not lost:
            lost.append(True)
            raise _lost()

    event.listen(Session, "after_flush", note_new_job)
    event.listen(Session, "after_commit", lose_the_answer)
    try:
        store = Store(pg_url)
        job_id = create_job(store, _space(tmp_path))
    finally:
        event.remove(Session, "after_flush", note_new_job)
        event.remove(Session, "after_commit", lose_the_answer)
    assert lost == [True]
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(JobModel)) == 1
    job = store.job(job_id)
    assert job.study_name == f"spectune-job-{job_id}" and job.state == "queued"
    assert optuna.get_all_study_names(storage=pg_url) == [f"spectune-job-{job_id}"]


def test_a_schema_check_meeting_a_restart_is_tried_again(pg_url, tmp_path, monkeypatch):
    real, calls = store_module.ensure_schema, []

    def down_once(url: str) -> None:
        calls.append(url)
        if len(calls) == 1:
            raise _lost()
        real(url)

    monkeypatch.setattr(store_module, "ensure_schema", down_once)
    store = Store(pg_url)
    job_id = create_job(store, _space(tmp_path))
    assert len(calls) == 2 and store.job(job_id).state == "queued"


def test_a_study_labelled_during_a_restart_is_labelled_once_it_is_back(
    pg_url, tmp_path, monkeypatch
):
    """``label_study`` names the objectives as the job is made: its writes were tried once,
    so a restart then answered 503 and left a hidden job behind."""
    from optuna.storages._rdb import models

    attr = models.StudyUserAttributeModel
    real, calls = attr.find_by_study_and_key, []

    def down_once(study: Any, key: str, session: Any) -> Any:
        calls.append(key)
        if len(calls) == 1:
            raise _lost()
        return real(study, key, session)

    monkeypatch.setattr(attr, "find_by_study_and_key", staticmethod(down_once))
    store = Store(pg_url)
    job_id = create_job(store, _space(tmp_path))
    assert calls == ["spectune", "spectune"]
    assert store.load_study(job_id).user_attrs["spectune"] == _space(tmp_path).name
