"""Pid files of running engines, so that an engine whose worker was killed (``kill -9``
leaves it running in its own session) is stopped by another worker of the same host: at
start-up, while idle, and before each trial.

A record names the engine's process group, its leader's start time (pids are reused), the
worker that owns it and the pid space (host and pid namespace) those pids belong to.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import psutil

__all__ = ["reap_stale", "record_group"]


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _pid_space() -> str:
    """Which pids this process can judge: its host and pid namespace. Workers in other
    containers may share a work folder, and their pids mean nothing here."""
    try:
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        ns = ""
    return f"{socket.gethostname()}/{ns}"


def record_group(run_dir: Path | None, pgid: int, argv: list[str]) -> Path | None:
    """A pid file for the engine's process group: if this worker is killed (``kill -9``
    leaves the engine running in its own session), the next worker on this host stops it."""
    if run_dir is None:
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    rec = {
        "pgid": pgid,
        "argv": argv,
        "create_time": _create_time(pgid),
        "owner_pid": me,
        "owner_create_time": _create_time(me),
        "pid_space": _pid_space(),
    }
    path = run_dir / f"engine-{pgid}.json"
    path.write_text(json.dumps(rec))
    return path


def _group_members(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (OSError, psutil.Error):
            pass
    return out


def _ours(rec: dict) -> bool:
    """The recorded group is still ours to kill: its leader is the process we started (the
    recorded start time; its command line is not compared, engines retitle themselves), or
    the leader is gone and members remain (the kernel reuses no pid while a process group
    of that id lives, so they are the engine's workers)."""
    pgid = int(rec["pgid"])
    try:
        leader = psutil.Process(pgid)
        return abs(leader.create_time() - float(rec["create_time"] or 0)) < 0.05
    except psutil.NoSuchProcess:
        return bool(_group_members(pgid))
    except (psutil.Error, TypeError, ValueError):
        return False


def reap_stale(run_dir: Path) -> list[int]:
    """Kill the engine groups left by workers of this host that died; their pid files go.
    A group whose worker still runs (another worker sharing the folder) is left alone.
    Returns the killed process-group ids. Raises nothing for a folder it cannot read: the
    workers call it between trials and while idle, where a reap must never stop a job."""
    try:
        paths = sorted(run_dir.glob("engine-*.json")) if run_dir.is_dir() else []
    except OSError:
        return []
    killed: list[int] = []
    for path in paths:
        try:
            pgid = _reap_one(path)
        except OSError:
            continue  # a pid file another worker removed meanwhile, or one not ours to remove
        if pgid is not None:
            killed.append(pgid)
    return killed


def _reap_one(path: Path) -> int | None:
    """One pid file: the group killed, or None (its worker lives, or nothing to kill)."""
    try:
        rec = json.loads(path.read_text())
        owner = _create_time(int(rec["owner_pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return None
    if rec.get("pid_space", _pid_space()) != _pid_space():
        return None  # another host's or container's worker: its pids are not ours to judge
    if owner is not None and abs(owner - float(rec.get("owner_create_time") or 0)) < 0.05:
        return None  # its worker is alive
    pgid = None
    if _ours(rec):
        try:
            os.killpg(int(rec["pgid"]), signal.SIGKILL)
            pgid = int(rec["pgid"])
        except (ProcessLookupError, PermissionError):
            pass
    path.unlink(missing_ok=True)
    return pgid
