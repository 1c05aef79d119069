"""The retry under every database call: a lost connection is waited out with backoff, any
other error fails at once (so a bug is never retried for minutes)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from tuner.storage import StorageError
from tuner.storage._retry import retry_db


class _Db:
    def __init__(self, url: str, errors: list[Exception]) -> None:
        self.url, self.errors, self.calls, self.retry_for_s = url, errors, 0, 5.0

    @retry_db
    def write(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "stored"


def _lost() -> Exception:
    try:
        raise OperationalError("INSERT", {}, Exception("server closed the connection"))
    except OperationalError as e:
        wrapped = StorageError(f"database error: {e}")
        wrapped.__cause__ = e
        return wrapped


def test_a_lost_connection_is_retried_until_the_server_is_back():
    db = _Db("postgresql://h/db", [_lost(), _lost()])
    assert db.write() == "stored" and db.calls == 3


def test_other_errors_and_a_server_down_too_long_fail():
    db = _Db("postgresql://h/db", [IntegrityError("INSERT", {}, Exception("duplicate"))])
    with pytest.raises(IntegrityError):
        db.write()
    assert db.calls == 1
    db = _Db("postgresql://h/db", [_lost() for _ in range(50)])
    db.retry_for_s = 1.0
    with pytest.raises(StorageError):
        db.write()
    assert 2 <= db.calls < 10


def test_sqlite_waits_out_its_write_lock_only():
    locked = OperationalError("INSERT", {}, Exception("database is locked"))
    db = _Db("sqlite:///x.db", [locked])
    assert db.write() == "stored" and db.calls == 2
    gone = OperationalError("SELECT", {}, Exception("unable to open database file"))
    db = _Db("sqlite:///x.db", [gone])
    with pytest.raises(OperationalError):
        db.write()
    assert db.calls == 1


# A study made or deleted once, under its caller's retry (``Store._create_study``); the
# heartbeat's own methods (record_heartbeat keeps beating through errors by itself).
_NOT_WRAPPED = {
    "create_new_study",
    "delete_study",
    "record_heartbeat",
    "get_heartbeat_interval",
    "get_heartbeat_stale_trial_callback",
}


def test_every_call_optunas_cache_makes_to_the_database_is_retried():
    """Found by bench/soak.py: ``study.get_trials`` reaches the database through Optuna's
    cache as ``_get_trials``, which the retry did not wrap; a PostgreSQL restart during it
    failed the job (StorageInternalError)."""
    import inspect
    import re

    from optuna.storages import _cached_storage

    from tuner.storage._retry import ResilientRDBStorage

    called = set(re.findall(r"self\._backend\.(\w+)", inspect.getsource(_cached_storage)))
    assert {"_get_trials", "set_trial_state_values"} <= called  # the scan still finds them
    retried = {
        n for n in called if getattr(getattr(ResilientRDBStorage, n), "__retry_db__", False)
    }
    retried |= {"set_trial_state_values"}  # its own retry, which knows a first attempt
    assert called - retried - _NOT_WRAPPED == set()


def test_a_service_starting_during_a_database_restart_waits_for_it(monkeypatch, capsys):
    """Found by bench/soak.py: a worker restarted while PostgreSQL was starting up exited
    ("the database system is starting up") and its slot stayed empty."""
    from tuner.cli import _service
    from tuner.storage import _retry

    class _Store:
        def __init__(self, errors: list[Exception]) -> None:
            self.errors, self.calls = errors, 0

        def ensure_schema(self) -> None:
            self.calls += 1
            if self.errors:
                raise self.errors.pop(0)

    monkeypatch.setattr(_retry.time, "sleep", lambda s: None)
    store = _Store([_lost(), _lost()])
    _service._ensure_schema(store)  # type: ignore[arg-type]
    assert store.calls == 3
    assert capsys.readouterr().err.count("database unreachable; trying again") == 2
    bad = StorageError("database schema is at revision x")  # not a lost connection
    with pytest.raises(StorageError):
        _service._ensure_schema(_Store([bad]))  # type: ignore[arg-type]
    with pytest.raises(StorageError):  # still away after the wait
        _service._ensure_schema(_Store([_lost(), _lost()]), wait_s=-1)  # type: ignore[arg-type]
