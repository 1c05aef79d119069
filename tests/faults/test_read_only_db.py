"""A database that turned read-only under a running job: every heartbeat fails the same way.
The log gets the first failure with its traceback, then a short line every few minutes, and
one line when the database works again; not a traceback every beat."""

from __future__ import annotations

import logging
import threading
import time

import optuna
import pytest

from tests.helpers import FAKE_PRESET, make_preset_dir
from tuner._repeated import RepeatedFailure
from tuner.job import create_job
from tuner.measure import JobControl
from tuner.space import loads_space
from tuner.storage import Store
from tuner.worker import _Heartbeat


@pytest.fixture
def urls(tmp_path) -> tuple[str, str]:
    """(read-write, read-only) URLs of one database holding job 1, claimed by worker w1."""
    db = tmp_path / "ro.db"
    rw = f"sqlite:///{db}"
    jid = create_job(Store(rw), loads_space(FAKE_PRESET, base_dir=make_preset_dir(tmp_path)))
    Store(rw).release_to_workers(jid, key=None, digest="-")
    assert Store(rw).claim_next("w1", stale_after_s=60) == jid == 1
    return rw, f"sqlite:///file:{db}?mode=ro&uri=true"


def _records(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name]


@pytest.mark.timeout(60)
def test_a_read_only_database_logs_the_job_heartbeat_failure_once(urls, caplog):
    caplog.set_level(logging.INFO, logger="spectune.worker")
    store = Store(urls[1])
    beats = 0
    real = store.heartbeat

    def counted(*a, **kw):
        nonlocal beats
        beats += 1
        return real(*a, **kw)

    store.heartbeat = counted  # type: ignore[method-assign]
    beat = _Heartbeat(store, 1, "w1", JobControl(), every_s=0.01, owner=True)
    beat.start()
    deadline = time.monotonic() + 30
    while beats < 30:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    beat.done.set()
    beat.join(timeout=10)
    (rec,) = _records(caplog, "spectune.worker")  # 30 failed beats, one record
    assert rec.levelno == logging.ERROR and rec.exc_info is not None
    assert "job 1: heartbeat failed" in rec.getMessage()
    assert "readonly database" in rec.getMessage() and "[SQL" not in rec.getMessage()


@pytest.mark.timeout(60)
def test_a_read_only_database_logs_the_trial_heartbeat_failure_once(urls, caplog):
    caplog.set_level(logging.INFO, logger="spectune.storage")
    rw, ro = urls
    study = optuna.load_study(study_name="spectune-job-1", storage=Store(rw).optuna_storage())
    trial_id = study.ask()._trial_id
    storage = Store(ro).optuna_storage(heartbeat_s=1.0, grace_s=60.0)
    for _ in range(20):
        storage.record_heartbeat(trial_id)
    (rec,) = _records(caplog, "spectune.storage")
    assert rec.levelno == logging.ERROR and rec.exc_info is not None
    assert "trial heartbeat" in rec.getMessage() and "readonly database" in rec.getMessage()
    Store(rw).optuna_storage(heartbeat_s=1.0, grace_s=60.0).record_heartbeat(trial_id)


def test_repeats_are_a_line_every_interval_and_the_end_is_one_line(caplog):
    caplog.set_level(logging.INFO, logger="t")
    now = [0.0]
    f = RepeatedFailure(logging.getLogger("t"), "beat", every_s=60, clock=lambda: now[0])
    err = OSError("read-only file system\nmore detail that changes")
    for t in range(0, 181):  # a failure a second for three minutes
        now[0] = float(t)
        f.failed(err)
    f.ok()
    f.ok()  # nothing more to say
    msgs = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert msgs[0] == (
        "ERROR",
        "beat failed (the same failure again is reported every 60 s): "
        "OSError: read-only file system",
    )
    assert [m for _, m in msgs[1:]] == [
        "beat still failing: 61 times in 60 s: OSError: read-only file system",
        "beat still failing: 121 times in 120 s: OSError: read-only file system",
        "beat still failing: 181 times in 180 s: OSError: read-only file system",
        "beat works again after 181 failures in 180 s",
    ]
    f.failed(ValueError("another"))  # a new failure is logged in full again
    assert caplog.records[-1].levelname == "ERROR" and caplog.records[-1].exc_info


def test_it_is_safe_from_many_threads():
    f = RepeatedFailure(logging.getLogger("t"), "beat")
    threads = [
        threading.Thread(target=lambda: [f.failed(OSError("x")) for _ in range(200)])
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert f._count == 800
