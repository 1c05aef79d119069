"""A private, throwaway PostgreSQL cluster for tests: loopback only, in a temporary folder.

Why: storage must behave the same on SQLite and a real PostgreSQL server, and fault tests must
be able to stop or restart that server mid-test, which a shared server cannot allow.

Usage::

    server = PgServer()       # nothing runs yet
    server.start()            # initdb (first time) + pg_ctl start, random free port on 127.0.0.1
    url = server.create_database("t1")    # postgresql://postgres@127.0.0.1:PORT/t1
    server.restart()          # same port and data: clients see their connections drop
    server.stop(mode="immediate")         # a crash, as far as clients can tell
    server.start()            # comes back on the same port with the same data
    server.destroy()          # stop and delete the folder

In pytest, take the session's cluster from the ``pg_server`` fixture (tests/conftest.py; a
test that stops it must start it again), or make one per module for fault tests that should
not disturb the rest. ``pg_url`` gives a fresh database on whichever server the run uses
(``TEST_DB_URL`` or the private one), ``any_db_url`` runs a test on SQLite and on PostgreSQL.
A run killed before its teardown leaves its cluster running: ``sweep_orphans()`` (called by
the fixture) stops the clusters whose owning process is gone. The server binaries come
from ``SPECTUNE_PG_BIN`` or Debian's ``/usr/lib/postgresql/<newest>/bin``. PostgreSQL refuses
to run as root; as root, the cluster runs as the ``postgres`` OS user (created if missing).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

__all__ = [
    "PgServer",
    "PgUnavailable",
    "create_database",
    "drop_database",
    "find_pg_bin",
    "sweep_orphans",
]

OS_USER = "postgres"
ROOT_PREFIX = "spectune-pg-"
OWNER_FILE = "owner.pid"
SUPERUSER = "postgres"
# Speed over durability: the cluster is thrown away, and crash tests use stop(mode="immediate").
FAST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
}


class PgUnavailable(RuntimeError):
    """The PostgreSQL server could not be found, initialised or started; the message says why."""


def find_pg_bin() -> Path:
    """The folder of ``initdb``/``pg_ctl``: ``SPECTUNE_PG_BIN`` or Debian's newest version."""
    explicit = os.environ.get("SPECTUNE_PG_BIN")
    candidates = [Path(explicit)] if explicit else []
    root = Path("/usr/lib/postgresql")
    if not explicit and root.is_dir():
        versions = [p for p in root.iterdir() if p.name.isdigit()]
        versions.sort(key=lambda p: int(p.name))
        candidates += [p / "bin" for p in reversed(versions)]
    on_path = shutil.which("pg_ctl")
    if not explicit and on_path:
        candidates.append(Path(on_path).parent)
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file():
            return c
    raise PgUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl) not found in "
        f"{[str(c) for c in candidates] or '/usr/lib/postgresql/*/bin'}; install Debian's "
        "`postgresql` package or set SPECTUNE_PG_BIN (or TEST_DB_URL to use a running server)"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ensure_os_user() -> None:
    """As root, PostgreSQL needs an unprivileged OS user to run as."""
    import pwd

    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", OS_USER],
            check=True,
            capture_output=True,
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_orphans() -> list[Path]:
    """Stop and delete the clusters of test runs killed before their teardown (their owning
    process is gone); clusters of live runs are left alone. Returns the folders removed."""
    removed = []
    for root in Path(tempfile.gettempdir()).glob(f"{ROOT_PREFIX}*"):
        try:
            owner = int((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if _alive(owner):
            continue
        try:
            PgServer(root=root).stop("immediate")
        except (PgUnavailable, OSError, subprocess.SubprocessError):
            pass
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed


class PgServer:
    """One private cluster: ``start()``, ``stop()``, ``restart()``, ``url(dbname)``.

    The port is chosen once (a free one on 127.0.0.1) and kept across restarts, so URLs handed
    out stay valid. Authentication is ``trust`` on loopback and on the private socket folder.
    ``root`` defaults to a new folder in the system temp dir; one given must be reachable by
    the ``postgres`` user when run as root (pytest's ``tmp_path`` is not: its parent is 0700).
    """

    def __init__(self, root: Path | None = None, bin_dir: Path | None = None) -> None:
        self.bin_dir = bin_dir or find_pg_bin()
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix=ROOT_PREFIX))
        if self._own_root:  # sweep_orphans() deletes it if this process dies without cleaning
            (self.root / OWNER_FILE).write_text(str(os.getpid()))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log_file = self.root / "server.log"
        self.port = _free_port()
        self._as_root = os.geteuid() == 0

    # -- process control ------------------------------------------------------------------

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", OS_USER, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    def _log_tail(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no server log)"

    def _init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if self._as_root:
            _ensure_os_user()
            shutil.chown(self.root, OS_USER)
            shutil.chown(self.socket_dir, OS_USER)
        r = self._run(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        if r.returncode != 0:
            raise PgUnavailable(f"initdb failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
        conf = "".join(f"{k} = '{v}'\n" for k, v in FAST_SETTINGS.items())
        conf += "listen_addresses = '127.0.0.1'\n"
        conf += f"unix_socket_directories = '{self.socket_dir}'\n"
        with open(self.data_dir / "postgresql.conf", "a") as f:
            f.write(conf)

    @property
    def running(self) -> bool:
        if not self.data_dir.is_dir():
            return False
        return self._run("pg_ctl", "status", "-D", str(self.data_dir)).returncode == 0

    def start(self) -> None:
        """Initialise on first use, then start and wait until it accepts connections."""
        if not (self.data_dir / "PG_VERSION").is_file():
            self._init()
        for attempt in range(3):
            r = self._run(
                "pg_ctl",
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-o",
                f"-p {self.port}",
                timeout=90,
            )
            if r.returncode == 0:
                return
            if "could not bind" in self._log_tail() and attempt < 2:
                self.port = _free_port()  # someone took the port between choosing and binding
                continue
            break
        raise PgUnavailable(
            f"pg_ctl start failed ({r.returncode}): {r.stderr.strip()}\n{self._log_tail()}"
        )

    def stop(self, mode: str = "fast") -> None:
        """``fast`` (clean shutdown, clients disconnected) or ``immediate`` (like a crash)."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"stop mode must be smart, fast or immediate, got {mode!r}")
        if not self.running:
            return
        r = self._run("pg_ctl", "stop", "-w", "-m", mode, "-D", str(self.data_dir))
        if r.returncode != 0:
            raise PgUnavailable(f"pg_ctl stop failed ({r.returncode}): {r.stderr.strip()}")

    def restart(self, mode: str = "fast") -> None:
        """Stop (``mode`` as in ``stop``) and start again on the same port with the same data."""
        self.stop(mode)
        self.start()

    def destroy(self) -> None:
        """Stop the server and delete its folder (when this object made the folder)."""
        try:
            self.stop("immediate")
        finally:
            if self._own_root:
                shutil.rmtree(self.root, ignore_errors=True)

    # -- databases --------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        """A SQLAlchemy URL for one database of this cluster (as the superuser)."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its URL."""
        return create_database(self.url(), name)


def create_database(admin_url: str, name: str | None = None) -> str:
    """CREATE DATABASE on the server of ``admin_url`` (any PostgreSQL, e.g. ``TEST_DB_URL``);
    the new database's URL."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    name = name or f"spectune_test_{uuid.uuid4().hex[:12]}"
    if not name.replace("_", "").isalnum():
        raise ValueError(f"database name must be letters, digits and _, got {name!r}")
    engine = create_engine(admin_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE template0'))
    finally:
        engine.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_database(admin_url: str, url: str) -> None:
    """DROP DATABASE of ``url``, ending its open connections first (PostgreSQL 13+)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    name = make_url(url).database
    engine = create_engine(admin_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()
