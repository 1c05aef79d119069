"""An API request during a database outage fails fast (503 after ``db_retry_s``), while the
worker's store keeps the storage layer's long retry so a running job outlives a restart."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tests.helpers import make_settings
from tuner.api import ServiceSettings, create_app, hash_token
from tuner.api._deps import get_store
from tuner.cli import main
from tuner.storage import Store
from tuner.storage._retry import RETRY_FOR_S
from tuner.worker import worker_from_settings

TOKEN = "spectune-test-token"


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_api_store_retry_is_short_and_configurable(tmp_path: Path, monkeypatch) -> None:
    s = make_settings(tmp_path)
    assert s.db_retry_s == 3.0
    assert get_store(s).retry_for_s == 3.0
    monkeypatch.setenv("SPECTUNE_DB_RETRY_S", "0.5")
    assert ServiceSettings().db_retry_s == 0.5
    assert get_store(ServiceSettings()).retry_for_s == 0.5
    # set on the API's own store only: every other Store keeps the long retry
    assert Store.retry_for_s == RETRY_FOR_S == 120.0
    assert Store(s.database_url).retry_for_s == RETRY_FOR_S


@pytest.mark.parametrize("bad", [-1, -0.001, float("nan"), float("inf")])
def test_db_retry_refuses_bad_values_naming_the_field(bad: float) -> None:
    with pytest.raises(ValidationError) as e:
        ServiceSettings(db_retry_s=bad)
    if bad < 0:
        msg = e.value.errors()[0]["msg"]
        assert "db_retry_s" in msg and "SPECTUNE_DB_RETRY_S" in msg


def test_cli_refuses_negative_db_retry_naming_the_field(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("SPECTUNE_DB_RETRY_S", "-2")
    rc = main(["worker", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--once"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "db_retry_s" in err and "-2" in err


@pytest.mark.timeout(60)  # without the short retry this request waits 120 s
def test_request_during_outage_answers_503_fast(tmp_path: Path) -> None:
    url = f"postgresql://spectune@127.0.0.1:{_closed_port()}/spectune"
    s = make_settings(tmp_path, database_url=url, api_token_sha256=(hash_token(TOKEN),))
    # no lifespan (its schema check would refuse to start): the route alone meets the outage
    client = TestClient(create_app(s, run_worker=False))
    t0 = time.monotonic()
    r = client.get("/api/jobs", headers={"Authorization": f"Bearer {TOKEN}"})
    elapsed = time.monotonic() - t0
    assert r.status_code == 503, r.text
    assert r.json()["detail"] == "database unavailable"
    assert 1.0 < elapsed < 10, elapsed  # retried for db_retry_s (3 s), then answered


@pytest.mark.timeout(60)
def test_the_token_check_rides_out_an_outage_like_every_read(tmp_path: Path) -> None:
    """Found by bench/soak.py: with no token configured (loopback), every request first
    asks the database whether any token exists; tried once, that check answered 503 at
    once to any request that met a database restart, while the route's own reads wait."""
    url = f"postgresql://spectune@127.0.0.1:{_closed_port()}/spectune"
    client = TestClient(create_app(make_settings(tmp_path, database_url=url), run_worker=False))
    t0 = time.monotonic()
    r = client.get("/api/jobs")
    elapsed = time.monotonic() - t0
    assert r.status_code == 503, r.text
    assert 1.0 < elapsed < 10, elapsed  # waited for db_retry_s (3 s) as the route would


def test_worker_store_keeps_the_long_retry(tmp_path: Path) -> None:
    s = make_settings(tmp_path, db_retry_s=1.0)
    with TestClient(create_app(s, run_worker=True)) as c:
        worker = c.app.state.worker
        assert worker is not None and worker.store.retry_for_s == RETRY_FOR_S
        assert c.get("/api/jobs").status_code == 200
    assert get_store(s).retry_for_s == 1.0
    w = worker_from_settings(Store(s.database_url), s)
    assert w.store.retry_for_s == RETRY_FOR_S


def test_a_lost_connection_inside_optunas_storage_is_a_503(tmp_path: Path, monkeypatch) -> None:
    """Found by bench/soak.py: Optuna wraps a lost connection in StorageInternalError, which
    the API answered as a 500 (a bug) rather than a 503 (the database)."""
    import optuna
    from sqlalchemy.exc import OperationalError

    from tuner.api.services import jobs

    def lost(*a: object, **kw: object) -> None:
        try:
            raise OperationalError("SELECT", {}, Exception("server closed the connection"))
        except OperationalError as e:
            raise optuna.exceptions.StorageInternalError("during the commit") from e

    monkeypatch.setattr(jobs, "submit", lost)
    settings = make_settings(tmp_path)
    Store(settings.database_url).ensure_schema()  # the token check reads its table first
    client = TestClient(create_app(settings, run_worker=False), raise_server_exceptions=False)
    r = client.post("/api/jobs", json={"preset": "tiny-cpu"})
    assert r.status_code == 503 and r.json()["detail"] == "database unavailable", r.text
