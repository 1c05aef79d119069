"""What the API answers about files a submitter names: the path as they wrote it (or relative
to the service's folder), never where the server keeps it, and never a value read from a
file that turned out not to be a workload or a surface."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from tests.api.test_predictions import write_chain_surface
from tests.helpers import FAKE_PRESET, make_settings
from tuner.api import create_app
from tuner.job import create_job, run_job
from tuner.space import parse_space
from tuner.storage import Store
from tuner.surface import FORMAT, read_surface

SECRET = "hunter2-not-for-clients"
POINT = {
    "config": {"method": "none"},
    "state": "complete",
    "workload": "w",
    "concurrency": 1,
    "metrics": {"output_tok_per_s": 1.0},
}


def _space(**changes) -> dict:
    return {**yaml.safe_load(FAKE_PRESET), **changes}


def _hidden(text: str, root: Path) -> None:
    assert str(root) not in text and SECRET not in text, text


@pytest.fixture
def served(tmp_path):
    s = make_settings(tmp_path)
    d = s.search_spaces_dir
    (d / "data").mkdir()
    (d / "data" / "env.txt").write_text(f"API_KEY={SECRET}\n")
    (d / "data" / "first.jsonl").write_text(json.dumps({"format": SECRET}) + "\n")
    (d / "data" / "row.jsonl").write_text(json.dumps({"prompt": 5, "note": SECRET}) + "\n")
    return s


@pytest.mark.timeout(60)
def test_refused_workload_and_surface_files_are_named_as_written(served, tmp_path):
    with TestClient(create_app(served, run_worker=False)) as c:
        for written in ("data/env.txt", "data/../data/first.jsonl", "data/row.jsonl"):
            for fmt in ("jsonl", "custom", "sharegpt"):
                wl = {"path": written, "builtin": None, "format": fmt, "num_prompts": 4}
                r = c.post(
                    "/api/search-spaces/validate", json={"search_space": _space(workload=wl)}
                )
                assert r.status_code == 422, r.text
                _hidden(r.text, tmp_path)
                assert written in r.json()["errors"][0]["msg"]
            replay = {"kind": "replay", "model": "target", "surface": written}
            r = c.post("/api/jobs", json={"search_space": _space(engine=replay)})
            assert r.status_code == 422, r.text  # not a job that fails later
            _hidden(r.text, tmp_path)
            (err,) = r.json()["errors"]
            assert err["loc"] == ["body", "search_space", "engine", "surface"]
            assert err["msg"].startswith(f"{written}:1: ")
        assert c.get("/api/jobs").json()["total"] == 0


@pytest.mark.timeout(60)
def test_a_surface_spoiled_after_submission_fails_the_job_without_paths_or_values(
    served, tmp_path
):
    surface = served.search_spaces_dir / "data" / "s.jsonl"
    header = {"format": FORMAT, "space": {"name": "x"}}
    surface.write_text(f"{json.dumps(header)}\n{json.dumps(POINT)}\n")
    replay = {"kind": "replay", "model": "target", "surface": "data/s.jsonl"}
    with TestClient(create_app(served, run_worker=False)) as c:
        r = c.post("/api/jobs", json={"search_space": _space(engine=replay)})
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
    surface.write_text(json.dumps({"format": SECRET}) + "\n")
    with TestClient(create_app(served)) as c:
        deadline = time.monotonic() + 40
        while (job := c.get(f"/api/jobs/{jid}").json())["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, job
            time.sleep(0.1)
        assert job["state"] == "failed" and "data/s.jsonl:1: format" in job["error"], job
        _hidden(json.dumps(job), tmp_path)
        _hidden(c.get(f"/api/jobs/{jid}/trials").text, tmp_path)


def test_the_export_refusal_of_a_replayed_job_names_the_surface_as_written(tmp_path):
    s = make_settings(tmp_path)
    write_chain_surface(tmp_path / "chain.jsonl")
    data = read_surface(tmp_path / "chain.jsonl").space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": "chain.jsonl"}
    store = Store(s.database_url)
    store.ensure_schema()
    jid = create_job(store, parse_space({**data, "trials": 2}, base_dir=tmp_path))
    run_job(store, jid, work_dir=tmp_path / "work")
    with TestClient(create_app(s, run_worker=False)) as c:
        r = c.get(f"/api/jobs/{jid}/export")
    assert r.status_code == 409 and "recorded surface chain.jsonl " in r.json()["detail"]
    _hidden(r.text, tmp_path)
