"""``spectune serve`` as a process on loopback: a port already taken is exit 1 with one line
naming host:port (uvicorn's own code, 3, is our "nothing feasible"), and the rate limit
counts the TCP peer, not an X-Forwarded-For a local client makes up, unless the operator
named trusted proxies."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tuner import cli
from tuner.api import ServiceSettings
from tuner.cli import EXIT_FAIL
from tuner.cli._service import uvicorn_options

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path: Path, port: int, **env: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tuner.cli", "serve", "--port", str(port), "--no-worker"]
    argv += ["--db", f"sqlite:///{tmp_path / 's.db'}"]
    return subprocess.Popen(
        argv,
        cwd=tmp_path,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@contextlib.contextmanager
def _running(tmp_path: Path, **env: str) -> Iterator[str]:
    port = _free_port()
    proc = _serve(tmp_path, port, **env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "server did not start"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_taken_port_is_exit_1_naming_host_and_port(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = _serve(tmp_path, port)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_FAIL, out
    assert f"spectune: error: cannot serve on 127.0.0.1:{port}: address already in use" in out
    assert "Application startup" not in out  # refused before the app (and a worker) started


def test_any_other_uvicorn_start_up_failure_is_exit_1_not_3(tmp_path, monkeypatch, capsys):
    # uvicorn exits 3 when it cannot start (a port taken between our check and its bind)
    monkeypatch.setattr("tuner.cli._service.uvicorn.run", lambda app, **kw: sys.exit(3))
    argv = ["serve", "--port", "0", "--no-worker", "--db", f"sqlite:///{tmp_path / 's.db'}"]
    assert cli.main(argv) == EXIT_FAIL
    assert "spectune: error: could not serve on 127.0.0.1:0" in capsys.readouterr().err


def _statuses(base: str, n: int) -> list[int]:
    with httpx.Client(base_url=base, timeout=10) as c:
        return [
            c.get(
                "/api/search-spaces", headers={"X-Forwarded-For": f"10.9.{i // 250}.{i % 250}"}
            ).status_code
            for i in range(n)
        ]


LIMITED = {"SPECTUNE_RATE_LIMIT_PER_S": "0.01", "SPECTUNE_RATE_LIMIT_BURST": "5"}


def test_a_made_up_forwarded_for_buys_no_fresh_rate_limit_budget(tmp_path):
    with _running(tmp_path, **LIMITED) as base:
        got = _statuses(base, 12)
    assert got[:5] == [200] * 5 and set(got[5:]) == {429}, got


def test_forwarded_for_counts_only_from_a_trusted_proxy(tmp_path):
    with _running(tmp_path, **LIMITED, SPECTUNE_TRUSTED_PROXIES="127.0.0.1") as base:
        assert _statuses(base, 12) == [200] * 12  # each named client has its own budget
    kw = uvicorn_options(ServiceSettings(database_url="sqlite://"))
    assert kw["proxy_headers"] is False
    kw = uvicorn_options(ServiceSettings(database_url="sqlite://", trusted_proxies="10.0.0.0/8"))
    assert kw["proxy_headers"] is True and kw["forwarded_allow_ips"] == ["10.0.0.0/8"]


def test_trusted_proxies_must_be_addresses_or_networks():
    with pytest.raises(ValueError, match="not an IP address or network"):
        ServiceSettings(database_url="sqlite://", trusted_proxies="proxy.example")
    ok = ServiceSettings(database_url="sqlite://", trusted_proxies="10.0.0.1, ::1,*")
    assert ok.trusted_proxies == ("10.0.0.1", "::1", "*")
