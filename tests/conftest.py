"""Shared fixtures. Tests marked ``engine`` launch real vLLM on the CPU (slow, serial)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAKE_SERVER = REPO / "tests" / "fake_openai_server.py"
TINY = REPO / "models" / "tiny"


@pytest.fixture
def space_dir(tmp_path: Path) -> Path:
    """A target, a draft sharing its vocabulary, and one that does not (tests/fake_space.py)."""
    from tests.fake_space import make_space_dir

    return make_space_dir(tmp_path)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'spectune.db'}"


@pytest.fixture
def fake_launcher() -> list[str]:
    """Launch the FAKE OpenAI server in place of vLLM (unit tests of the data flow only)."""
    return [sys.executable, str(FAKE_SERVER)]


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


@pytest.fixture
def tiny_models(tmp_path: Path) -> Path:
    return TINY


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def trial_records(url: str, job_id: int) -> list[dict]:
    """The trial read model as ``spectune trials --json`` prints it (metrics at top level)."""
    from tuner.storage import Store

    return [r.flat() for r in Store(url).trial_records(job_id)]
