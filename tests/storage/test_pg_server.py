"""The private PostgreSQL cluster the fault tests restart, and what a restart costs a client."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.pg_server import PgServer, create_database, drop_database, sweep_orphans
from tuner.storage import Store, ensure_schema, get_engine

REPO = Path(__file__).resolve().parents[2]


def test_a_restart_keeps_port_and_data_and_pooled_clients_carry_on(pg_server: PgServer):
    url = create_database(pg_server.url())
    try:
        ensure_schema(url)
        assert Store(url).list_jobs()[1] == 0
        port = pg_server.port
        pg_server.restart()
        assert pg_server.port == port and pg_server.running
        # the pool's connections died with the server; pre-ping replaces them unseen
        with get_engine(url).connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM spectune_jobs")).scalar() == 0
        pg_server.stop(mode="immediate")  # a crash, as clients see it
        assert not pg_server.running
        pg_server.start()
        assert Store(url).list_jobs()[1] == 0
    finally:
        if not pg_server.running:
            pg_server.start()
        get_engine(url).dispose()
        drop_database(pg_server.url(), url)


def test_a_bad_stop_mode_is_refused_by_name(pg_server: PgServer):
    with pytest.raises(ValueError, match="stop mode"):
        pg_server.stop(mode="now")
    assert pg_server.running


def test_a_cluster_left_by_a_killed_test_run_is_swept():
    """A run killed before its teardown leaves its server running; the next run stops it."""
    code = (
        "import os; from tests.pg_server import PgServer; s = PgServer(); s.start(); "
        "print(s.root, s.port, flush=True); os._exit(0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    root_s, port = out.stdout.split()
    root = Path(root_s)
    assert _accepts(int(port))  # still up after its owner died
    assert root in sweep_orphans()
    assert not root.exists() and not _accepts(int(port))


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
