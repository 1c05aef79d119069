"""The soak's processes (bench/soak.py): the service and workers, each in its own process
group, a durable PostgreSQL, and a small filesystem the soak can fill.

Why a process group each: a fault is aimed at one process and what it started (``kill -9`` of
a worker takes its engines' parent away, not the engines: they are in their own groups, and
whether another worker reaps them is one of the soak's checks).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.pg_server import PgServer

__all__ = ["Proc", "SmallDisk", "durable_pg", "rss_kib"]

# tests/pg_server.py trades durability for speed; a soak that restarts the server with
# ``immediate`` (a crash) must not lose what the server acknowledged, so these go back on.
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


def durable_pg() -> PgServer:
    """A private PostgreSQL cluster with the default durability settings."""
    pg = PgServer()
    pg.start()
    with open(pg.data_dir / "postgresql.conf", "a") as f:  # the last setting wins
        f.write("".join(f"{k} = '{v}'\n" for k, v in DURABLE.items()))
    pg.restart()
    return pg


def rss_kib(pid: int) -> int | None:
    """Resident set size of ``pid`` in KiB, or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class Proc:
    """A restartable command in its own session (so its own process group), its output
    appended to ``log``."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.name, self.argv, self.log, self.env = name, argv, log, env
        self.popen: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            out.write(f"\n=== soak: start {self.name} at {time.time():.3f}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.starts += 1

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        """To the process's group only (the service's and workers' own children with it)."""
        if self.alive():
            assert self.popen is not None
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout_s: float = 60) -> int | None:
        """SIGTERM (a worker drains), then SIGKILL after ``timeout_s``; the exit status."""
        if self.popen is None:
            return None
        self.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        self.signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.popen.wait(timeout=30)


class SmallDisk:
    """A tmpfs of ``size_mib`` mounted at ``path`` (the workers' log folder), which
    ``fill`` fills to ENOSPC and ``drain`` empties. ``problem`` says why it could not be
    made (mounting needs root or CAP_SYS_ADMIN); the soak then skips the fault and says so."""

    BALLAST = ".soak-ballast"

    def __init__(self, path: Path, size_mib: int = 16) -> None:
        self.path = path
        self.problem: str | None = None
        path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            self.problem = f"mount -t tmpfs failed: {(r.stderr or r.stdout).strip()}"

    def fill(self) -> int:
        """Bytes written before the filesystem said ENOSPC."""
        written = 0
        chunk = b"\0" * (1 << 20)
        with open(self.path / self.BALLAST, "ab", buffering=0) as f:
            while True:
                try:
                    written += f.write(chunk) or 0
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    return written

    def full(self) -> bool:
        st = os.statvfs(self.path)
        return st.f_bavail == 0

    def drain(self) -> None:
        (self.path / self.BALLAST).unlink(missing_ok=True)

    def close(self) -> None:
        if self.problem is None:
            self.drain()
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
