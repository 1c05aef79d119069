"""One FAKE-engine job shared by the integration tests (a job takes seconds; run it once),
with MLflow logging to a file store in a temporary folder."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from tests.fake_space import _space, make_space_dir
from tests.helpers import fake_measurers
from tuner.integrations import ENV_EXPERIMENT, ENV_TRACKING_URI
from tuner.job import create_job, run_job
from tuner.storage import Store

FAKE_SERVER = Path(__file__).resolve().parents[1] / "fake_openai_server.py"


@dataclass(frozen=True)
class FinishedJob:
    db_url: str
    job_id: int
    mlflow_uri: str
    experiment: str


def wsgi_call(app: Callable[..., Any], path: str, method: str = "GET") -> tuple[str, bytes]:
    """One request to a WSGI app (optuna-dashboard's bottle app): (status, body)."""
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method}
    setup_testing_defaults(environ)
    environ["wsgi.input"] = io.BytesIO(b"")
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    return status[0], body


def wsgi_get(app: Callable[..., Any], path: str) -> dict[str, Any]:
    """GET ``path`` and decode its JSON (what the dashboard's pages draw)."""
    status, body = wsgi_call(app, path)
    assert status.startswith("200"), (status, body[:300])
    return json.loads(body)


@pytest.fixture(scope="package")
def finished_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FinishedJob]:
    """8 trials over 7 distinct configurations (so one trial at least reuses another's
    launch: the plain sampler repeats itself, the guided search would not), the best one
    confirmed, every trial logged to MLflow."""
    d = make_space_dir(tmp_path_factory.mktemp("job"))
    db_url = f"sqlite:///{d / 'spectune.db'}"
    uri = (d / "mlruns").as_uri()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_TRACKING_URI, uri)
        mp.setenv(ENV_EXPERIMENT, "spectune-test")
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps file stores opt-in
        job_id = create_job(Store(db_url), _space(d, trials=8, confirm=1, search="sampler"))
        launcher = [sys.executable, str(FAKE_SERVER)]
        run_job(Store(db_url), job_id, work_dir=d / "work", measurers=fake_measurers(launcher))
        yield FinishedJob(db_url, job_id, uri, "spectune-test")
