"""The engine side of running many workers: each engine sees only its worker's devices, and
a worker starting on a host stops the engine groups of dead workers there, and only those."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.faults.faultkit import HERE, group_alive
from tuner.engines import EngineConfig, reap_stale, server_class

pytestmark = pytest.mark.timeout(120)


def _server(tmp_path: Path, device: str, devices: str | None):
    dump = tmp_path / f"env-{device}.json"
    launcher = [sys.executable, str(HERE / "env_engine.py"), "--dump-env", str(dump)]
    cfg = EngineConfig(model=str(tmp_path), device=device)  # type: ignore[arg-type]
    srv = server_class("vllm")(
        cfg,
        tmp_path / f"{device}.log",
        cache_root=tmp_path / "cache",
        launcher=launcher,
        devices=devices,
        run_dir=tmp_path / "run",
    )
    return srv, dump


def test_an_engine_sees_only_its_workers_devices(tmp_path: Path):
    srv, dump = _server(tmp_path, "cuda", "2,3")
    with srv:
        (pid_file,) = (tmp_path / "run").glob("engine-*.json")
        assert json.loads(pid_file.read_text())["pgid"] == srv.proc.pid
        env = json.loads(dump.read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert list((tmp_path / "run").glob("engine-*.json")) == []  # gone with the engine
    srv, dump = _server(tmp_path, "cpu", "2,3")  # on CPU the list is only recorded
    with srv:
        env = json.loads(dump.read_text())
    assert env.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


def _record(run: Path, pgid: int, owner_pid: int, create_time: float | None) -> Path:
    run.mkdir(exist_ok=True)
    owner = psutil.Process(owner_pid).create_time() if psutil.pid_exists(owner_pid) else 0.0
    p = run / f"engine-{pgid}.json"
    rec = {"pgid": pgid, "argv": ["x"], "create_time": create_time, "owner_pid": owner_pid}
    p.write_text(json.dumps({**rec, "owner_create_time": owner}))
    return p


def test_only_groups_of_dead_workers_are_reaped(tmp_path: Path):
    run = tmp_path / "run"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    groups = [subprocess.Popen(sleeper, start_new_session=True) for _ in range(3)]
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner.wait()
    try:
        times = [psutil.Process(p.pid).create_time() for p in groups]
        orphan = _record(run, groups[0].pid, dead_owner.pid, times[0])
        _record(run, groups[1].pid, os.getpid(), times[1])  # its worker (us) is alive
        _record(run, groups[2].pid, dead_owner.pid, times[2] - 100)  # pid reused: not ours
        assert reap_stale(run) == [groups[0].pid]
        deadline = time.monotonic() + 10
        while group_alive(groups[0].pid) and time.monotonic() < deadline:
            groups[0].poll()
            time.sleep(0.05)
        assert groups[0].wait(timeout=5) < 0 and not orphan.exists()
        assert groups[1].poll() is None and groups[2].poll() is None
        assert [p.name for p in run.glob("*.json")] == [f"engine-{groups[1].pid}.json"]
    finally:
        for p in groups:
            p.kill()
            p.wait()


def test_a_group_recorded_in_another_pid_space_is_left_alone(tmp_path: Path):
    """Workers in other containers (their own pid namespace) may share the work folder: a
    record of theirs names pids that mean nothing here, so it is neither killed nor removed
    (a live worker there would lose the record that lets its host reap its engine)."""
    run = tmp_path / "run"
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner.wait()
    try:
        p = _record(run, sleeper.pid, dead_owner.pid, psutil.Process(sleeper.pid).create_time())
        p.write_text(json.dumps({**json.loads(p.read_text()), "pid_space": "other-host/1"}))
        assert reap_stale(run) == []
        assert p.exists() and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
