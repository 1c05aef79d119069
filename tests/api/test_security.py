"""Issue 14: tokens in the database, rate and body limits, paths confined to the service's
roots, engines launched without a shell, engine logs scrubbed before they are served."""

from __future__ import annotations

import ast
import inspect
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from tests.engines.test_engine_process import _server
from tests.helpers import FAKE_PRESET, make_settings
from tuner.api import ServiceSettings, create_app, hash_token
from tuner.api._limits import TokenBucket
from tuner.api._scrub import REDACTED, scrub
from tuner.cli import main
from tuner.storage import Store, TrialModel

REPO = Path(__file__).resolve().parents[2]
JOB_ROUTES = [
    ("GET", "/api/jobs"),
    ("POST", "/api/jobs"),
    ("GET", "/api/jobs/1"),
    ("POST", "/api/jobs/1/cancel"),
    ("GET", "/api/jobs/1/trials"),
    ("GET", "/api/jobs/1/trials/0"),
    ("GET", "/api/jobs/1/pareto"),
    ("GET", "/api/jobs/1/export"),
    ("GET", "/api/export-formats"),
    ("POST", "/api/search-spaces/validate"),
    ("GET", "/metrics"),
]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --------------------------------------------------------------------------- tokens


def test_a_stored_token_turns_auth_on_and_a_revoked_one_fails_at_once(tmp_path):
    s = make_settings(tmp_path)
    with TestClient(create_app(s, run_worker=False)) as c:
        assert c.get("/api/jobs").status_code == 200  # no token anywhere: auth off
        info, token = Store(s.database_url).create_token("ci")
        for method, path in JOB_ROUTES:
            r = c.request(method, path, json={"preset": "fake-small"})
            assert r.status_code == 401, (method, path)
            assert r.headers["content-type"] == "application/problem+json"
            assert r.headers["www-authenticate"] == "Bearer"
            assert c.request(method, path, headers=_bearer("spt_nope")).status_code == 401
        ok = _bearer(token)
        assert c.post("/api/jobs", json={"preset": "fake-small"}, headers=ok).status_code == 201
        assert c.get("/api/jobs/1", headers=ok).status_code == 200
        assert c.get("/metrics", headers=ok).status_code == 200
        Store(s.database_url).revoke_token("ci")
        assert c.get("/api/jobs/1", headers=ok).status_code == 401  # the very next request
        # revoking the last token does not open the server again
        assert c.get("/api/jobs/1").status_code == 401
        # health, readiness, presets, the document and the UI shell stay open
        for path in ("/healthz", "/readyz", "/api/search-spaces", "/openapi.json", "/"):
            assert c.get(path).status_code == 200, path


def test_every_api_operation_but_the_preset_list_needs_auth(tmp_path):
    """Catches a route added later without the auth dependency (the list above cannot)."""
    with TestClient(create_app(make_settings(tmp_path), run_worker=False)) as c:
        doc = c.get("/openapi.json").json()
    open_ops = {
        f"{m.upper()} {p}"
        for p, item in doc["paths"].items()
        for m, op in item.items()
        if (p.startswith("/api/") or p == "/metrics") and not op.get("security")
    }
    assert open_ops == {"GET /api/search-spaces"}


def test_env_digests_still_work_beside_stored_tokens(tmp_path):
    s = make_settings(tmp_path, api_token_sha256=(hash_token("from-env"),))
    with TestClient(create_app(s, run_worker=False)) as c:
        assert c.get("/api/jobs").status_code == 401
        assert c.get("/api/jobs", headers=_bearer("from-env")).status_code == 200
        _, token = Store(s.database_url).create_token()
        assert c.get("/api/jobs", headers=_bearer(token)).status_code == 200
        assert c.get("/api/jobs", headers=_bearer("from-env")).status_code == 200


def test_require_auth_refuses_job_data_before_any_token_exists(tmp_path):
    s = make_settings(tmp_path, require_auth=True)
    with TestClient(create_app(s, run_worker=False)) as c:
        assert c.get("/api/jobs").status_code == 401
        _, token = Store(s.database_url).create_token("first")
        assert c.get("/api/jobs", headers=_bearer(token)).status_code == 200
    # and it counts as auth for serving beyond loopback
    assert ServiceSettings(host="0.0.0.0", require_auth=True).auth_enabled


def test_token_cli_prints_the_token_once_and_stores_only_its_digest(tmp_path, capsys):
    db = tmp_path / "t.db"
    url = f"sqlite:///{db}"
    assert main(["token", "create", "--name", "ci", "--db", url]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("spt_") and len(token) > 40
    assert token.encode() not in db.read_bytes()
    with sqlite3.connect(db) as conn:
        (digest,) = conn.execute("SELECT sha256 FROM spectune_api_tokens").fetchone()
    assert digest == hash_token(token)
    assert main(["token", "create", "--name", "ci", "--db", url]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["token", "list", "--db", url]) == 0
    listed = capsys.readouterr().out
    assert "ci" in listed and "active" in listed and token not in listed
    assert main(["token", "revoke", "ci", "--db", url]) == 0
    assert main(["token", "revoke", "no-such", "--db", url]) == 2
    capsys.readouterr()
    assert main(["token", "list", "--json", "--db", url]) == 0
    assert '"revoked_at": "20' in capsys.readouterr().out
    assert main(["token", "create", "--name", "9lives", "--db", url]) == 2
    assert "--name" in capsys.readouterr().err


# --------------------------------------------------------------------------- limits


def test_rate_limit_is_a_429_with_retry_after_per_client(tmp_path):
    s = make_settings(tmp_path, rate_limit_per_s=0.25, rate_limit_burst=2)
    with TestClient(create_app(s, run_worker=False)) as c:
        assert [c.get("/api/search-spaces").status_code for _ in range(2)] == [200, 200]
        r = c.get("/api/search-spaces")
        assert r.status_code == 429
        assert r.headers["content-type"] == "application/problem+json"
        assert 1 <= int(r.headers["retry-after"]) <= 4
        assert r.json()["status"] == 429 and "rate limit" in r.json()["detail"]
        assert c.get("/healthz").status_code == 200  # not counted
        # a made-up token buys no fresh budget
        assert c.get("/api/search-spaces", headers=_bearer("x" * 20)).status_code == 429
    # another address has its own budget
    app = create_app(s, run_worker=False)
    with TestClient(app) as c, TestClient(app, client=("10.0.0.2", 5000)) as other:
        assert [c.get("/api/search-spaces").status_code for _ in range(3)] == [200, 200, 429]
        assert other.get("/api/search-spaces").status_code == 200


def test_token_bucket_refills_at_its_rate():
    now = [0.0]
    b = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [b.take("a") for _ in range(3)] == [0, 0, 0]
    assert b.take("a") == pytest.approx(0.5)
    assert b.take("b") == 0
    now[0] = 0.5
    assert b.take("a") == 0 and b.take("a") > 0
    now[0] = 100.0  # never beyond the burst
    assert [b.take("a") for _ in range(3)] == [0, 0, 0] and b.take("a") > 0


def test_oversized_body_is_a_problem_document(tmp_path):
    s = make_settings(tmp_path)
    with TestClient(create_app(s, run_worker=False)) as c:
        r = c.post("/api/jobs", json={"search_space_yaml": "x" * (s.max_body_bytes + 1)})
    assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["title"] == "Content Too Large" or r.json()["status"] == 413


# --------------------------------------------------------------------------- paths


def _space(**changes) -> dict:
    space = yaml.safe_load(FAKE_PRESET)
    for dotted, value in changes.items():
        node = space
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return space


def _refused(c: TestClient, space: dict, loc: list) -> str:
    r = c.post("/api/search-spaces/validate", json={"search_space": space})
    assert r.status_code == 422, r.text
    hit = [e for e in r.json()["errors"] if e["loc"] == ["body", "search_space", *loc]]
    assert hit, r.json()["errors"]
    return hit[0]["msg"]


@pytest.fixture
def confined(tmp_path):
    s = make_settings(tmp_path, max_input_file_bytes=1024)
    with TestClient(create_app(s, run_worker=False)) as c:
        yield c, s


@pytest.mark.timeout(60)
def test_paths_outside_the_roots_are_refused(confined, tmp_path):
    c, s = confined
    d = s.search_spaces_dir
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.jsonl").write_text('{"prompt": "secret"}\n')
    (d / "escape.jsonl").symlink_to(outside / "w.jsonl")
    (d / "escape-model").symlink_to(outside)
    wl = {"path": "escape.jsonl", "builtin": None}
    assert "inside the service's folders" in _refused(c, _space(workload=wl), ["workload", "path"])
    dots = {"path": "../outside/w.jsonl", "builtin": None}
    assert "inside" in _refused(c, _space(workload=dots), ["workload", "path"])
    assert "inside" in _refused(c, _space(**{"engine.model": "escape-model"}), ["engine", "model"])
    drafts = {"num_speculative_tokens": {"min": 1, "max": 2}, "drafts": ["../../.."]}
    loc = ["methods", "draft_model", "drafts", 0]
    assert "inside" in _refused(c, _space(**{"methods.draft_model": drafts}), loc)
    replay = {"kind": "replay", "model": "target", "surface": str(outside / "w.jsonl")}
    assert "inside" in _refused(c, _space(engine=replay), ["engine", "surface"])
    abs_wl = {"path": "/etc/passwd", "builtin": None}
    assert "inside" in _refused(
        c,
        _space(workloads=[{"builtin": "chat"}, abs_wl]),
        [
            "workloads",
            1,
            "path",
        ],
    )


@pytest.mark.timeout(60)
def test_fifos_devices_folders_and_oversized_files_are_refused(confined):
    c, s = confined
    d = s.search_spaces_dir
    os.mkfifo(d / "pipe.jsonl")  # opening it would block the request forever
    (d / "zero.jsonl").symlink_to("/dev/zero")  # outside the roots anyway
    (d / "big.jsonl").write_text('{"prompt": "x"}\n' * 200)  # over the 1024-byte limit
    (d / "file-not-model").write_text("x")
    for name, why in [
        ("pipe.jsonl", "regular file"),
        ("zero.jsonl", "inside"),
        ("big.jsonl", "over the limit of 1024"),
        ("target", "regular file"),
        ("missing.jsonl", "no such file"),
    ]:
        wl = {"path": name, "builtin": None}
        assert why in _refused(c, _space(workload=wl), ["workload", "path"]), name
    model = {"engine.model": "file-not-model"}
    assert "model folder" in _refused(c, _space(**model), ["engine", "model"])


@pytest.mark.timeout(60)
def test_dev_zero_is_refused_even_inside_a_configured_root(tmp_path):
    s = make_settings(tmp_path, path_roots=(Path("/dev"),))
    with TestClient(create_app(s, run_worker=False)) as c:
        wl = {"path": "/dev/zero", "builtin": None}
        assert "regular file" in _refused(c, _space(workload=wl), ["workload", "path"])


def test_a_configured_root_is_accepted_and_nothing_is_stored_when_refused(tmp_path):
    extra = tmp_path / "data"
    extra.mkdir()
    (extra / "w.jsonl").write_text('{"prompt": "hello"}\n' * 8)
    wl = {"path": str(extra / "w.jsonl"), "builtin": None}
    refused = make_settings(tmp_path)
    with TestClient(create_app(refused, run_worker=False)) as c:
        r = c.post("/api/jobs", json={"search_space": _space(workload=wl)})
        assert r.status_code == 422
        assert c.get("/api/jobs").json()["total"] == 0
    allowed = make_settings(tmp_path, path_roots=(extra,))
    with TestClient(create_app(allowed, run_worker=False)) as c:
        r = c.post("/api/search-spaces/validate", json={"search_space": _space(workload=wl)})
        assert r.status_code == 200, r.text


def test_routes_that_read_files_run_off_the_event_loop(tmp_path):
    """Sync routes run in the thread pool: a slow disk never stalls other requests."""
    app = create_app(make_settings(tmp_path), run_worker=False)
    reading = {"submit_job", "validate_search_space", "list_presets", "get_trial", "list_trials"}
    found = {r.name: r.endpoint for r in app.routes if getattr(r, "name", None) in reading}
    assert set(found) == reading
    assert not [n for n, fn in found.items() if inspect.iscoroutinefunction(fn)]


# --------------------------------------------------------------------------- no shell


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, ast.unparse(node.func)


def test_no_shell_anywhere_in_the_package():
    bad = []
    for f in (REPO / "tuner").rglob("*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for call, name in _calls(tree):
            where = f"{f.relative_to(REPO)}:{call.lineno} {name}"
            if name in ("os.system", "os.popen", "asyncio.create_subprocess_shell"):
                bad.append(where)
            for kw in call.keywords:
                if kw.arg == "shell" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is False
                ):
                    bad.append(where + " shell=")
            if name.startswith("subprocess.") and call.args:
                if isinstance(call.args[0], ast.Constant | ast.JoinedStr | ast.BinOp):
                    bad.append(where + " a string command")
    assert bad == []


def test_the_engine_is_launched_with_an_argv_list(tmp_path, monkeypatch):
    seen: list[tuple[object, dict]] = []

    class Stop(Exception):
        pass

    def record(args, **kw):
        seen.append((args, kw))
        raise Stop

    monkeypatch.setattr(subprocess, "Popen", record)
    srv = _server(tmp_path, "print('unused')\n")
    with pytest.raises(Stop):
        srv.start()
    ((argv, kw),) = seen
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert not kw.get("shell") and argv[0] not in ("sh", "/bin/sh", "bash")


# --------------------------------------------------------------------------- scrubbing


def test_scrub_takes_out_tokens_and_keys():
    env_key = "prov-Xy7Qk2LmN8pR4tW"
    text = (
        "curl -H 'Authorization: Bearer abc.def-123456' http://x\n"
        "headers={'authorization': 'Basic dXNlcjpwYXNz'}\n"
        "vllm serve m --api-key s3cr3t-value-42 --port 1\n"
        "api_key=lettersand123 OPENAI key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX done\n"
        "ours spt_McZKZ5UKQ4YDATU8sFQYCch85QNP4Dnnn and hf_abcdefghijklmnopqrstu\n"
        f"provider said {env_key}; INFO throughput 12.5 tok/s\n"
    )
    out = scrub(text, [env_key, "short"])
    for secret in (
        "abc.def-123456",
        "dXNlcjpwYXNz",
        "s3cr3t-value-42",
        "lettersand123",
        "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX",
        "spt_McZKZ5UKQ4YDATU8sFQYCch85QNP4Dnnn",
        "hf_abcdefghijklmnopqrstu",
        env_key,
    ):
        assert secret not in out, secret
    assert out.count(REDACTED) >= 8
    assert "INFO throughput 12.5 tok/s" in out and "--port 1" in out


def test_served_logs_are_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVIDER_KEY", "prov-Xy7Qk2LmN8pR4tW")
    s = make_settings(tmp_path, hosted_api_key_envs=("PROVIDER_KEY",))
    log = s.work_dir / "logs" / "trial-0.log"
    log.parent.mkdir(parents=True)
    secret_text = (
        "Authorization: Bearer tok-123456789 key prov-Xy7Qk2LmN8pR4tW sk-ABCDEFGHIJKLMNOPQRST"
    )
    log.write_text("starting\n" + secret_text + "\n")
    with TestClient(create_app(s, run_worker=False)) as c:
        job = c.post("/api/jobs", json={"preset": "fake-small"}).json()
        store = Store(s.database_url)
        store.load_study(job["id"]).ask()  # the trial the rows below describe
        with store.session() as sess:
            sess.add(
                TrialModel(
                    job_id=job["id"],
                    number=0,
                    state="fail",
                    method="none",
                    params={},
                    engine_config={},
                    engine_key="k",
                    fail_reason="crash",
                    fail_detail=secret_text,
                    log_path=str(log),
                )
            )
        page = c.get(f"/api/jobs/{job['id']}/trials").json()["items"][0]
        detail = c.get(f"/api/jobs/{job['id']}/trials/0").json()
    for served in (page["fail_detail"], detail["fail_detail"], detail["log_tail"]):
        assert "starting" in detail["log_tail"] and REDACTED in served
        for secret in ("tok-123456789", "prov-Xy7Qk2LmN8pR4tW", "sk-ABCDEFGHIJKLMNOPQRST"):
            assert secret not in served
