"""A submitted space may name models by Hugging Face hub id: an id is no path, so the path
confinement lets it through; a name that exists in the service's folder is still a path."""

from __future__ import annotations

import pytest
import yaml
from fastapi.testclient import TestClient

from tests.helpers import FAKE_PRESET, make_settings
from tuner.api import create_app


@pytest.mark.timeout(60)
def test_hub_ids_pass_the_path_confinement_and_paths_stay_confined(tmp_path):
    s = make_settings(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (s.search_spaces_dir / "org").mkdir()
    (s.search_spaces_dir / "org" / "escape").symlink_to(outside)
    space = yaml.safe_load(FAKE_PRESET)
    space["engine"]["model"] = "meta-llama/Llama-3.1-8B-Instruct"
    space["methods"]["draft_model"]["drafts"] = ["meta-llama/Llama-3.2-1B-Instruct"]
    with TestClient(create_app(s, run_worker=False)) as c:
        r = c.post("/api/search-spaces/validate", json={"search_space": space})
        assert r.status_code == 200, r.text
        # reads as an id, but exists beside the presets: a path, and this one leaves the roots
        space["engine"]["model"] = "org/escape"
        r = c.post("/api/search-spaces/validate", json={"search_space": space})
    assert r.status_code == 422
    (err,) = [
        e for e in r.json()["errors"] if e["loc"] == ["body", "search_space", "engine", "model"]
    ]
    assert "inside the service's folders" in err["msg"]
