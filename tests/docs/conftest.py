"""The jobs the docs' examples run against, made once per session: job 1 replayed from the
recorded tiny-cpu surface (what every page's examples read), and, for the few commands a
replay refuses (export), job 1 of a second database measured through the FAKE engine of the
tests (its numbers measure nothing and are never shown on a page)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tests.docs._examples import REPO
from tests.fake_space import make_space_dir
from tests.helpers import fake_measurers
from tuner import cli
from tuner.job import create_job, run_job
from tuner.space import loads_space
from tuner.storage import Store

# FAKE engine, n-gram only so the winner's exports have the documented keys.
MEASURED = """
name: docs-fake-engine
engine: {model: target, served_model_name: fake, startup_timeout_s: 30}
methods:
  ngram:
    num_speculative_tokens: {min: 4, max: 4}
    prompt_lookup_min: {min: 2, max: 2}
    prompt_lookup_max: {min: 3, max: 3}
max_num_seqs: [4]
concurrency: [1]
workload: {num_prompts: 4, max_tokens: 16, warmup_requests: 1}
slo: {p99_tpot_ms: 1000}
measurement: {repeats: 1, confirm_top: 0}
trials: 2
seed: 0
"""


@pytest.fixture(scope="session")
def replay_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file whose job 1 is ``bench/tiny-cpu-replay.yaml``, run as the docs run it."""
    root = tmp_path_factory.mktemp("docs-replay")
    db = root / "replay.db"
    argv = ["run", str(REPO / "bench" / "tiny-cpu-replay.yaml"), "--json"]
    argv += ["--db", f"sqlite:///{db}", "--work-dir", str(root / "work")]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(argv) == 0
    return db


@pytest.fixture(scope="session")
def measured_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file whose job 1 was measured by launches of the FAKE engine."""
    root = tmp_path_factory.mktemp("docs-measured")
    db = root / "measured.db"
    store = Store(f"sqlite:///{db}")
    job = create_job(store, loads_space(MEASURED, base_dir=make_space_dir(root / "space")))
    run_job(store, job, work_dir=root / "work", measurers=fake_measurers())
    return db
