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
