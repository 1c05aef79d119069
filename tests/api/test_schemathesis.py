"""Schemathesis against the served OpenAPI document (ASGI, in process, with a bearer token).

Every operation gets generated requests, valid and invalid, from the schema itself; the checks
fail the run on any 5xx, a status code the document does not list, a body or header that
does not match its schema, or a content type it does not declare. Bounded (a few examples
per operation) so it runs within ``make test``. Not checked: that every schema-violating
request is refused (``negative_data_rejection``), since unknown query parameters are ignored,
as most HTTP APIs do. One finished job (FAKE engine) exists, so generated requests on job 1
reach real answers and not only 404s.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode, checks
from schemathesis.schemas import APIOperation

from tests.helpers import FAKE_LAUNCHER, fake_measurers, make_settings
from tuner.api import create_app
from tuner.storage import Store
from tuner.worker import Worker

# A deeper run: SPECTUNE_SCHEMATHESIS_EXAMPLES=200 pytest tests/api/test_schemathesis.py
MAX_EXAMPLES = int(os.environ.get("SPECTUNE_SCHEMATHESIS_EXAMPLES", "10"))
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """The app, its token, and one finished job."""
    root: Path = tmp_path_factory.mktemp("schemathesis")
    s = make_settings(root, rate_limit_per_s=0)
    app = create_app(s, run_worker=False)
    with TestClient(app) as c:  # runs the lifespan: the schema is created
        _, token = Store(s.database_url).create_token("schemathesis")
        auth = {"Authorization": f"Bearer {token}"}
        job = c.post("/api/jobs", json={"preset": "fake-small", "trials": 2}, headers=auth)
        assert job.status_code == 201, job.text
        worker = Worker(
            Store(s.database_url), work_dir=s.work_dir, measurers=fake_measurers(FAKE_LAUNCHER)
        )
        assert worker.run_once() == job.json()["id"]
        yield app, token


def _run(operation: APIOperation, mode: GenerationMode, token: str, counts: Counter) -> None:
    auth = {"Authorization": f"Bearer {token}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=[Phase.generate],
    )
    def one(case: Case) -> None:
        counts[f"{operation.method.upper()} {operation.path}"] += 1
        case.call_and_validate(headers=auth, checks=CHECKS)

    try:
        one()
    except Unsatisfiable:
        # No invalid request exists for an operation without inputs (/healthz).
        assert mode is GenerationMode.NEGATIVE, operation.path


def test_api_conforms_to_its_openapi(served, capsys):
    app, token = served
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 14, "the document lost operations"
    counts: Counter = Counter()
    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _run(op, mode, token, counts)
    with capsys.disabled():
        print(f"\nschemathesis: {len(operations)} operations, {sum(counts.values())} cases")
    assert set(counts) == {f"{op.method.upper()} {op.path}" for op in operations}


def test_the_checks_can_fail():
    """The harness above must be able to fail: an undocumented 500 is caught."""
    bad = FastAPI()

    @bad.get("/boom", responses={200: {"description": "never"}})
    def boom() -> dict[str, str]:
        raise HTTPException(500, "boom")

    op = next(
        r.ok() for r in schemathesis.openapi.from_asgi("/openapi.json", bad).get_all_operations()
    )
    case = op.Case()
    with pytest.raises(BaseExceptionGroup) as e:
        case.call_and_validate(checks=CHECKS)
    kinds = {type(x).__name__ for x in e.value.exceptions}
    assert {"UndefinedStatusCode", "ServerError"} <= kinds
