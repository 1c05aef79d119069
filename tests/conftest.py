"""Shared fixtures. Tests marked ``engine`` launch real vLLM on the CPU (slow, serial)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Tests never reach the Hugging Face hub: a hub id resolves from a cache a test builds
# (tests/hf_cache.py, the ``hf_cache`` fixture); a test of downloads replaces huggingface_hub's
# calls. Set before anything imports huggingface_hub, which reads it once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.helpers import FAKE_SERVER, TINY  # noqa: E402
from tests.hf_cache import build_hf_cache  # noqa: E402
from tests.pg_server import (  # noqa: E402
    PgServer,
    PgUnavailable,
    create_database,
    drop_database,
    sweep_orphans,
)

# vLLM's CPU build picks its kernels by platform: imported in a test process without a GPU
# and without this, the platform is unspecified and its default kernels need AVX-512 (an
# AVX2-only host dies with "Illegal instruction"; measured). Engines get it from SpecTune.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


@pytest.fixture
def space_dir(tmp_path: Path) -> Path:
    """A target, a draft sharing its vocabulary, and one that does not (tests/fake_space.py)."""
    from tests.fake_space import make_space_dir

    return make_space_dir(tmp_path)


@pytest.fixture(scope="session")
def hf_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An offline hub cache of the tiny models (spectune/tiny-target, -draft, -eagle,
    -eagle3, -target-mtp), built once per session."""
    return build_hf_cache(tmp_path_factory.mktemp("hf") / "hub")


@pytest.fixture
def hf_cache(hf_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """That cache as this test's HF_HUB_CACHE, offline."""
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hf_cache_dir


@pytest.fixture
def empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HF_HUB_CACHE, offline: no hub model is on this machine."""
    cache = tmp_path / "empty-hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'spectune.db'}"


# PostgreSQL: TEST_DB_URL names a server to create test databases on (as Optuna's storage tests
# do); unset, the session starts a private cluster (tests/pg_server.py). A server that cannot be
# had fails the PostgreSQL tests, unless SPECTUNE_SKIP_PG=1 skips them.
TEST_DB_URL_ENV = "TEST_DB_URL"
SKIP_PG_ENV = "SPECTUNE_SKIP_PG"


def _pg_unavailable(why: str) -> None:
    if os.environ.get(SKIP_PG_ENV) == "1":
        pytest.skip(f"PostgreSQL unavailable ({SKIP_PG_ENV}=1): {why}")
    pytest.fail(
        f"PostgreSQL tests need a server and none could be had: {why}\n"
        f"Install Debian's postgresql package (`make test` does), set {TEST_DB_URL_ENV} to a "
        f"server where this user may CREATE DATABASE, or set {SKIP_PG_ENV}=1 to skip them.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's private PostgreSQL cluster (a ``tests.pg_server.PgServer``), started on
    first use and destroyed at the end. Tests that stop or restart it must leave it running."""
    try:
        sweep_orphans()  # clusters of earlier runs that were killed before their teardown
        server = PgServer()
        server.start()
    except (PgUnavailable, OSError, subprocess.SubprocessError) as e:
        _pg_unavailable(str(e))
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def pg_admin_url(request: pytest.FixtureRequest) -> str:
    """A URL on the PostgreSQL server the tests create their databases on."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError
    from sqlalchemy.pool import NullPool

    url = os.environ.get(TEST_DB_URL_ENV)
    if not url:
        return request.getfixturevalue("pg_server").url()
    try:
        backend = make_url(url).get_backend_name()
    except ArgumentError as e:
        pytest.fail(f"{TEST_DB_URL_ENV} is not a database URL: {e}", pytrace=False)
    if backend != "postgresql":
        pytest.fail(f"{TEST_DB_URL_ENV} must be a postgresql:// URL, got {backend}", pytrace=False)
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as e:
        _pg_unavailable(f"{TEST_DB_URL_ENV} server unreachable: {e}")
    finally:
        engine.dispose()
    return url


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test only; dropped afterwards."""
    from sqlalchemy.exc import SQLAlchemyError

    from tuner.storage import get_engine

    try:
        url = create_database(pg_admin_url)
    except SQLAlchemyError as e:
        pytest.fail(f"cannot CREATE DATABASE for a test (needs CREATEDB): {e}", pytrace=False)
    yield url
    get_engine(url).dispose()
    drop_database(pg_admin_url, url)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test runs twice: on a new SQLite file and on a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'spectune.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def fake_launcher() -> list[str]:
    """Launch the FAKE OpenAI server in place of vLLM (unit tests of the data flow only)."""
    return [sys.executable, str(FAKE_SERVER)]


@pytest.fixture
def tiny_models(tmp_path: Path) -> Path:
    return TINY


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(autouse=True)
def _tuner_log_level() -> Iterator[None]:
    """The benchmarks a test runs quieten SpecTune's logger for their whole process
    (``bench/hpo``): give the next test the level it had, so its ``caplog`` sees warnings."""
    logger = logging.getLogger("tuner")
    level = logger.level
    yield
    logger.setLevel(level)
