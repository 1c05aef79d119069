"""The API answers hostile and careless input with a 4xx naming the field, never a 500:
huge paging numbers, odd keys, non-finite numbers, deep nesting, argv injection, secrets
sent to a host the submitter chose, and a database that went away under a ready server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tests.helpers import make_settings
from tuner.api import ServiceSettings, create_app

BASE = {"name": "x", "engine": {"model": "target"}, "methods": {"ngram": {}}}
VALIDATE = "/api/search-spaces/validate"
JSON = {"content-type": "application/json"}
HUGE = 9223372036854775808  # 2**63: one past SQLite's largest integer


@pytest.fixture
def settings(tmp_path: Path) -> ServiceSettings:
    return make_settings(tmp_path)


@pytest.fixture
def client(settings: ServiceSettings):
    app = create_app(settings, run_worker=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def _locs(r) -> list[list]:
    assert r.status_code == 422, (r.status_code, r.text[:500])
    return [e["loc"] for e in r.json()["errors"]]


@pytest.mark.parametrize(
    "url, loc",
    [
        (f"/api/jobs?offset={HUGE}", ["query", "offset"]),
        (f"/api/jobs?limit={HUGE}", ["query", "limit"]),
        (f"/api/jobs/1/trials?offset={HUGE}", ["query", "offset"]),
        (f"/api/jobs/1/trials?limit={HUGE}", ["query", "limit"]),
        (f"/api/jobs/1/trials/{HUGE}", ["path", "number"]),
    ],
)
def test_huge_paging_numbers_are_a_422_naming_the_field(client, url: str, loc: list):
    client.post("/api/jobs", json={"preset": "fake-small"})  # a job 1 to page through
    assert _locs(client.get(url)) == [loc]


def test_odd_keys_keep_their_name_in_the_422(client):
    body = {"search_space": {**BASE, "¹": 1, "a.b": 2, "c: d": 3, "concurrency": [0]}}
    locs = _locs(client.post(VALIDATE, json=body))
    prefix = ["body", "search_space"]
    for loc in (["¹"], ["a.b"], ["c: d"], ["concurrency", 0]):
        assert [*prefix, *loc] in locs


@pytest.mark.parametrize(
    "raw, loc",
    [
        ('{"preset": "fake-small", "slo": {"p99_tpot_ms": NaN}}', ["body", "slo", "p99_tpot_ms"]),
        (
            '{"preset": "fake-small", "slo": {"p99_ttft_ms": Infinity}}',
            ["body", "slo", "p99_ttft_ms"],
        ),
        ('{"preset": "fake-small", "trials": 1e999}', ["body", "trials"]),
        (
            '{"search_space": {"name": "x", "engine": {"model": "target"}, '
            '"methods": {"ngram": {}}, "memory_fraction": [-Infinity]}}',
            ["body", "search_space", "memory_fraction", 0],
        ),
    ],
)
def test_non_finite_numbers_are_a_422_naming_the_field(client, raw: str, loc: list):
    for url in (VALIDATE, "/api/jobs"):
        r = client.post(url, content=raw, headers=JSON)
        assert loc in _locs(r)
        assert "finite" in r.text
    assert client.get("/api/jobs").json()["total"] == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_query_numbers_are_a_422_naming_the_field(client, value: str):
    r = client.get(f"/api/jobs/1/pareto?slo_p99_tpot_ms={value}")
    assert _locs(r) == [["query", "slo_p99_tpot_ms"]]


def test_deep_nesting_is_a_422_not_a_recursion_error(client):
    r = client.post(VALIDATE, json={"search_space_yaml": "[" * 50_000})
    assert _locs(r) == [["body", "search_space_yaml"]] and "nested deeper" in r.text
    deep: object = 1
    for _ in range(600):
        deep = {"a": deep}
    for url in (VALIDATE, "/api/jobs"):
        r = client.post(url, json={"search_space": {**BASE, "x": deep}})
        assert _locs(r) == [["body", "search_space"]] and "nested deeper" in r.text
    raw = '{"search_space": ' + '{"a":' * 40_000 + "1" + "}" * 40_001
    r = client.post(VALIDATE, content=raw, headers=JSON)
    assert r.status_code in (400, 422), r.status_code
    assert client.get("/api/jobs").json()["total"] == 0


def test_seed_and_depth_out_of_range_are_a_422_naming_the_field(client):
    for space, loc in (
        ({**BASE, "seed": 2**32}, ["seed"]),
        ({**BASE, "seed": -1}, ["seed"]),
        (
            {**BASE, "methods": {"ngram": {"num_speculative_tokens": {"min": 1, "max": 10**9}}}},
            ["methods", "ngram", "num_speculative_tokens", "max"],
        ),
    ):
        assert ["body", "search_space", *loc] in _locs(
            client.post("/api/jobs", json={"search_space": space})
        )
    assert client.get("/api/jobs").json()["total"] == 0


def test_engine_argv_injection_is_a_422_naming_the_field(client):
    engine = {"model": "target", "extra_args": ["--host", "0.0.0.0"], "dtype": "auto --port 1"}
    engine["served_model_name"] = "x --api-key k"
    locs = _locs(client.post("/api/jobs", json={"search_space": {**BASE, "engine": engine}}))
    prefix = ["body", "search_space", "engine"]
    for loc in (["extra_args", 0], ["dtype"], ["served_model_name"]):
        assert [*prefix, *loc] in locs
    assert client.get("/api/jobs").json()["total"] == 0
    ok = {"model": "target", "extra_args": ["--block-size", "16"], "dtype": "bfloat16"}
    assert client.post(VALIDATE, json={"search_space": {**BASE, "engine": ok}}).status_code == 200


def _hosted(**over: str) -> dict:
    ref = {"name": "p", "base_url": "http://provider.example:8000/v1", "model": "m", **over}
    return {"search_space": {**BASE, "hosted": [ref]}}


def test_hosted_keys_and_hosts_are_refused_unless_configured(client):
    body = _hosted(api_key_env="HOME", base_url="http://attacker.example:9/v1")
    locs = _locs(client.post("/api/jobs", json=body))
    prefix = ["body", "search_space", "hosted", 0]
    assert [*prefix, "api_key_env"] in locs and [*prefix, "base_url"] in locs
    # Not even a keyless reference to an unlisted host: the default allows none.
    assert _locs(client.post(VALIDATE, json=_hosted())) == [[*prefix, "base_url"]]
    assert client.get("/api/jobs").json()["total"] == 0


def test_configured_hosted_keys_and_hosts_pass(tmp_path: Path):
    s = make_settings(
        tmp_path, hosted_hosts=("provider.example",), hosted_api_key_envs=("PROVIDER_KEY",)
    )
    prefix = ["body", "search_space", "hosted", 0]
    with TestClient(create_app(s, run_worker=False), raise_server_exceptions=False) as c:
        assert c.post(VALIDATE, json=_hosted(api_key_env="PROVIDER_KEY")).status_code == 200
        assert (
            c.post(VALIDATE, json=_hosted(base_url="https://provider.example")).status_code == 200
        )
        for url in (
            "http://attacker.example/v1",
            "http://provider.example@attacker.example/v1",
            "http://provider.example.attacker.example/v1",
            "http://attacker.example\\@provider.example/v1",
            "http://provider.example/v1\n",
            "http://provider.example:99999/v1",
        ):
            assert _locs(c.post(VALIDATE, json=_hosted(base_url=url))) == [[*prefix, "base_url"]]
        r = c.post(VALIDATE, json=_hosted(api_key_env="AWS_SECRET_ACCESS_KEY"))
        assert _locs(r) == [[*prefix, "api_key_env"]]


def test_hosted_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECTUNE_HOSTED_HOSTS", "a.example, b.example:8443")
    monkeypatch.setenv("SPECTUNE_HOSTED_API_KEY_ENVS", "OPENAI_API_KEY,PROVIDER_KEY")
    s = ServiceSettings()
    assert s.hosted_hosts == ("a.example", "b.example:8443")
    assert s.hosted_api_key_envs == ("OPENAI_API_KEY", "PROVIDER_KEY")
    for bad in ({"hosted_hosts": ("http://x",)}, {"hosted_api_key_envs": ("A B",)}):
        with pytest.raises(ValidationError):
            ServiceSettings(**bad)
    monkeypatch.delenv("SPECTUNE_HOSTED_HOSTS")
    monkeypatch.delenv("SPECTUNE_HOSTED_API_KEY_ENVS")
    assert ServiceSettings().hosted_hosts == () and ServiceSettings().hosted_api_key_envs == ()


def test_readyz_is_503_once_the_database_file_is_gone_or_replaced(settings, client):
    assert client.get("/readyz").status_code == 200
    assert client.get("/api/jobs").status_code == 200  # a pooled connection is now open
    db = Path(settings.database_url.removeprefix("sqlite:///"))
    db.unlink()
    r = client.get("/readyz")
    assert r.status_code == 503 and "database" in r.json()["problems"][0]
    assert not db.exists()  # the check itself creates no empty file in its place
    sqlite3.connect(db).close()  # an empty database where ours was: no schema
    r = client.get("/readyz")
    assert r.status_code == 503 and "schema" in r.json()["problems"][0]
