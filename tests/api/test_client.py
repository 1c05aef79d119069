"""``tuner.client``: light (no server dependencies), tolerant of unknown fields, problem+json
errors, retries with backoff in ``wait`` and in an idempotent ``submit``."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.helpers import make_settings
from tuner.api import create_app
from tuner.client import ApiError, SpecTuneClient

JOB = {"id": 7, "name": "x", "state": "running", "n_trials": 4}


def test_importing_the_client_loads_no_server_dependency():
    code = (
        "import sys, tuner.client\n"
        "heavy = ('fastapi', 'starlette', 'optuna', 'sqlalchemy', 'tuner.api', 'tuner.engines')\n"
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _client(answers: list, seen: list | None = None, **kw) -> tuple[SpecTuneClient, list]:
    """A client over a mock transport answering ``answers`` in turn (an exception is raised
    as the transport's failure); the pauses it takes are recorded, never slept."""
    slept: list[float] = []
    it = iter(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        a = next(it)
        if isinstance(a, Exception):
            raise a
        return a

    http = httpx.Client(base_url="http://t", transport=httpx.MockTransport(handle))
    return SpecTuneClient(http=http, sleep=slept.append, **kw), slept


def _problem(status: int, detail: str = "x", **extra) -> httpx.Response:
    body = {"type": "about:blank", "title": "t", "status": status, "detail": detail, **extra}
    headers = {"content-type": "application/problem+json"}
    if status == 429:
        headers["retry-after"] = "7"
    return httpx.Response(status, json=body, headers=headers)


def test_unknown_fields_are_ignored():
    newer = {**JOB, "state": "succeeded", "brand_new_field": {"a": 1}, "eta_s": None}
    api, _ = _client([httpx.Response(200, json=newer)])
    job = api.job(7)
    assert job.state == "succeeded" and job.id == 7 and not hasattr(job, "brand_new_field")


def test_wait_rides_out_restarts_and_rate_limits_with_backoff():
    answers = [
        httpx.ConnectError("refused"),
        _problem(503, "database unavailable"),
        _problem(429, "rate limit"),
        httpx.Response(200, json=JOB),
        httpx.Response(200, json={**JOB, "state": "succeeded"}),
    ]
    api, slept = _client(answers, backoff_s=1.0)
    assert api.wait(7, poll_s=2.0).state == "succeeded"
    # 1, 2 (doubling), then at least the server's Retry-After of 7; then the poll interval
    assert slept[0] == pytest.approx(1.0, rel=0.3) and slept[1] == pytest.approx(2.0, rel=0.3)
    assert 7.0 <= slept[2] <= 7.0 * 1.25 and slept[3] == 2.0


def test_wait_gives_up_after_its_retries_and_never_retries_a_client_error():
    api, slept = _client([_problem(503)] * 3, retries=2)
    with pytest.raises(ApiError) as e:
        api.wait(7)
    assert e.value.status == 503 and len(slept) == 2
    api, slept = _client([_problem(404, "job 7 not found")])
    with pytest.raises(ApiError) as e:
        api.wait(7)
    assert e.value.status == 404 and e.value.detail == "job 7 not found" and slept == []


def test_submit_sends_the_idempotency_key_as_a_header_and_retries_only_then():
    seen: list[httpx.Request] = []
    created = httpx.Response(201, json=JOB)
    api, slept = _client([httpx.ConnectError("reset"), created], seen)
    assert api.submit(preset="p", idempotency_key="nightly-1").id == 7
    assert [r.headers.get("idempotency-key") for r in seen] == ["nightly-1", "nightly-1"]
    assert "idempotency_key" not in json.loads(seen[0].content) and len(slept) == 1
    api, _ = _client([httpx.ConnectError("reset")])
    with pytest.raises(httpx.ConnectError):
        api.submit(preset="p")  # without a key a retry could make a second job


def test_problem_errors_carry_their_field_errors():
    errors = [{"loc": ["body", "preset"], "msg": "unknown", "type": "value_error"}]
    api, _ = _client([_problem(422, "body.preset: unknown", errors=errors)])
    with pytest.raises(ApiError) as e:
        api.submit(preset="nope")
    assert e.value.errors == errors and e.value.problem["status"] == 422
    # an older server's FastAPI 422 list still reads as field errors
    api, _ = _client([httpx.Response(422, json={"detail": errors})])
    with pytest.raises(ApiError) as e:
        api.submit(preset="nope")
    assert e.value.errors == errors


def test_against_the_real_app(tmp_path):
    s = make_settings(tmp_path)
    with TestClient(create_app(s, run_worker=False)) as c:
        api = SpecTuneClient(http=c)
        first = api.submit(preset="fake-small", idempotency_key="k-1")
        again = api.submit(preset="fake-small", idempotency_key="k-1")
        assert first.id == again.id and api.jobs().total == 1
        with pytest.raises(ApiError) as e:
            api.submit(preset="fake-small", trials=2, idempotency_key="k-1")
        assert e.value.status == 409
        with pytest.raises(ApiError) as e:
            api.submit(preset="no-such")
        assert e.value.status == 422 and e.value.errors[0]["loc"] == ["body", "preset"]
        assert api.cancel(first.id).state == "cancelled"
        assert [p.name for p in api.presets()] == ["fake-small"]
