"""The trial read model: a trial's constraints read by name (``constraints:<name>``), never
by filtering the numbered copy kept for optuna-dashboard; and a stored prediction's point
read as a workload and a concurrency, whichever version stored it."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.fake_space import _space
from tuner.integrations import DASHBOARD_CONSTRAINTS_KEY
from tuner.integrations._dashboard import write_dashboard_attrs
from tuner.job import create_job
from tuner.storage import Store, TrialRecord, named_constraints, prediction_point

# ------------------------------------------------------------------ named constraints


def test_named_constraints_reads_only_the_named_entries() -> None:
    attrs = {
        DASHBOARD_CONSTRAINTS_KEY: [9.0, 9.0],  # the dashboard's unnamed copy
        "constraints:p99_tpot_ms": 1.5,
        "constraints:0": -2,  # a constraint whose name happens to be a number
        "constraints_note": "not a constraint",
        "fixed_params": {"a": 1},
    }
    assert named_constraints(attrs) == {"p99_tpot_ms": 1.5, "0": -2.0}
    assert named_constraints({DASHBOARD_CONSTRAINTS_KEY: [1.0]}) == {}


def test_records_and_dashboard_keep_every_named_constraint(space_dir: Path, db_url: str):
    """A name made of digits is a name: neither the records nor the dashboard's list drop
    it, and reading it back does not collide with the dashboard's numbered copy."""
    space = _space(space_dir)
    job_id = create_job(Store(db_url), space)
    study = Store(db_url).load_study(job_id)
    trial = study.ask()
    trial.set_constraint("p99_tpot_ms", 2.5)
    trial.set_constraint("0", -1.0)
    write_dashboard_attrs(trial, [], {}, space)
    study.tell(trial, [1.0, 2.0])

    frozen = Store(db_url).load_study(job_id).trials[0]
    assert frozen.user_attrs["constraint_names"] == ["0", "p99_tpot_ms"]
    assert frozen.system_attrs[DASHBOARD_CONSTRAINTS_KEY] == [-1.0, 2.5]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        [record] = Store(db_url).trial_records(job_id)
    assert record.constraints == {"p99_tpot_ms": 2.5, "0": -1.0}
    assert not [w for w in seen if "constraint" in str(w.message)]


# ------------------------------------------------------------------ stored predictions

NEW = {"objective": "output_tok_per_s", "value": 300.0, "rel_sigma": 0.1}


@pytest.mark.parametrize(
    ("pred", "point"),
    [
        ({**NEW, "workload": "chat", "concurrency": 4}, ("chat", 4)),
        ({**NEW, "level": "chat@1"}, ("chat", 1)),  # stored before the typed fields
        ({**NEW, "level": "team@chat@16"}, ("team@chat", 16)),  # the last @ splits
        ({**NEW, "level": "chat"}, None),
        ({**NEW, "level": "chat@many"}, None),
        (NEW, None),
    ],
)
def test_a_stored_predictions_point_is_read_in_one_place(pred, point) -> None:
    assert prediction_point(pred) == point


def _record(search: dict | None) -> TrialRecord:
    return TrialRecord(
        number=3,
        state="complete",
        method="ngram",
        params={},
        concurrency=1,
        workload="chat",
        metrics={"output_tok_per_s": 330.0},
        search=search,
    )


def test_a_record_serves_old_and_new_notes_alike() -> None:
    old = _record({"by": "guide: depth", "predicted": {**NEW, "level": "chat@1"}})
    new = _record(
        {"by": "guide: depth", "predicted": {**NEW, "workload": "chat", "concurrency": 1}}
    )
    for rec in (old, new):
        pred = rec.search["predicted"]  # type: ignore[index]
        assert (pred["workload"], pred["concurrency"], pred["level"]) == ("chat", 1, "chat@1")
        assert rec.prediction_error_pct == pytest.approx(10.0)
    assert old.search == new.search
    # notes without a prediction, or none at all, pass through untouched
    assert _record({"by": "sampler"}).search == {"by": "sampler"}
    assert _record(None).search is None
    partial = _record({"by": "guide: depth", "predicted": NEW})
    assert partial.search == {"by": "guide: depth", "predicted": NEW}
