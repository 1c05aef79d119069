"""One worker-from-settings factory for ``spectune worker`` and ``spectune serve``: both
build their worker from the service settings, never by hand."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.helpers import fake_measurers, make_settings
from tuner import worker as worker_mod
from tuner.api import ServiceSettings, create_app
from tuner.cli import main
from tuner.storage import Store
from tuner.worker import Worker, worker_from_settings


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
    fake = fake_measurers()
    w = worker_from_settings(store, s, devices="0,1", measurers=fake)
    assert w.store is store and w.work_dir == tmp_path / "w"
    assert (w.poll_s, w.heartbeat_s, w.stale_after_s) == (0.3, 1.5, 9.0)
    assert (w.devices, w.measurers, w.join) == ("0,1", fake, True)
    bare = worker_from_settings(store, s)
    assert (bare.devices, bare.measurers) == (None, None)


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
    assert w.work_dir == tmp_path / "w" and w.devices == "0,1" and w.measurers is None


def test_spectune_serve_embeds_a_worker_from_settings(tmp_path: Path, monkeypatch) -> None:
    calls = _spy(monkeypatch, "tuner.api._app")
    s = make_settings(tmp_path)
    fake = fake_measurers()
    with TestClient(create_app(s, run_worker=True, measurers=fake)) as c:
        [(args, kwargs, w)] = calls
        assert c.app.state.worker is w and args[1] is s
        assert kwargs == {"measurers": fake}
        assert (w.poll_s, w.heartbeat_s, w.stale_after_s) == (0.2, 0.5, 5.0)
        assert w.work_dir == s.work_dir and w.devices is None
    with TestClient(create_app(s, run_worker=False)) as c:
        assert c.app.state.worker is None and len(calls) == 1
