"""A submission meeting a database restart while its study is made (bench/soak.py: a 503 on
``POST /api/jobs``): the study is made again, once, and the job stands."""

from __future__ import annotations

from typing import Any

import optuna
from sqlalchemy.exc import OperationalError

from tests.job.test_shared_job import _space
from tuner.job import create_job
from tuner.storage import Store


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
