"""Review mends: one worker-from-settings factory for ``spectune worker`` and ``spectune
serve``, and a trial's constraints read by name (``constraints:<name>``), never by filtering
the numbered copy kept for optuna-dashboard."""

from __future__ import annotations

import warnings
from pathlib import Path

from fastapi.testclient import TestClient

from tests.helpers import FAKE_LAUNCHER, make_settings
from tests.fake_space import _space
from tuner import worker as worker_mod
from tuner.api import ServiceSettings, create_app
from tuner.cli import main
from tuner.integrations import DASHBOARD_CONSTRAINTS_KEY
from tuner.integrations._dashboard import write_dashboard_attrs
from tuner.job import create_job
from tuner.storage import Store, named_constraints
from tuner.worker import Worker, worker_from_settings

# ------------------------------------------------------------------ worker from settings


def _spy(monkeypatch, module: str) -> list[tuple[tuple, dict, Worker]]:
    calls: list[tuple[tuple, dict, Worker]] = []

    def spy(*args, **kwargs):
        w = worker_mod.worker_from_settings(*args, **kwargs)
        calls.append((args, kwargs, w))
        return w

    monkeypatch.setattr(f"{module}.worker_from_settings", spy)
    return calls


def test_worker_from_settings_copies_the_service_settings(tmp_path: Path) -> None:
    s = ServiceSettings(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
        work_dir=tmp_path / "w",
        worker_poll_s=0.3,
        worker_heartbeat_s=1.5,
        worker_stale_after_s=9.0,
    )
    store = Store(s.database_url)
    w = worker_from_settings(store, s, devices="0,1", launcher=FAKE_LAUNCHER)
    assert w.store is store and w.work_dir == tmp_path / "w"
    assert (w.poll_s, w.heartbeat_s, w.stale_after_s) == (0.3, 1.5, 9.0)
    assert (w.devices, w.launcher, w.join) == ("0,1", FAKE_LAUNCHER, True)
    bare = worker_from_settings(store, s)
    assert (bare.devices, bare.launcher) == (None, None)


def test_spectune_worker_builds_its_worker_from_settings(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECTUNE_WORKER_POLL_S", "0.3")
    monkeypatch.setenv("SPECTUNE_WORKER_HEARTBEAT_S", "1.5")
    monkeypatch.setenv("SPECTUNE_WORKER_STALE_AFTER_S", "9")
    calls = _spy(monkeypatch, "tuner.cli._service")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["worker", "--db", url, "--work-dir", str(tmp_path / "w"), "--devices", "0,1"]
    assert main([*argv, "--once"]) == 0
    [(args, kwargs, w)] = calls
    assert args[0].url == url and kwargs == {"devices": "0,1"}
    assert (w.poll_s, w.heartbeat_s, w.stale_after_s) == (0.3, 1.5, 9.0)
    assert w.work_dir == tmp_path / "w" and w.devices == "0,1" and w.launcher is None


def test_spectune_serve_embeds_a_worker_from_settings(tmp_path: Path, monkeypatch) -> None:
    calls = _spy(monkeypatch, "tuner.api._app")
    s = make_settings(tmp_path)
    with TestClient(create_app(s, run_worker=True, launcher=FAKE_LAUNCHER)) as c:
        [(args, kwargs, w)] = calls
        assert c.app.state.worker is w and args[1] is s
        assert kwargs == {"launcher": FAKE_LAUNCHER}
        assert (w.poll_s, w.heartbeat_s, w.stale_after_s) == (0.2, 0.5, 5.0)
        assert w.work_dir == s.work_dir and w.devices is None
    with TestClient(create_app(s, run_worker=False)) as c:
        assert c.app.state.worker is None and len(calls) == 1


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
