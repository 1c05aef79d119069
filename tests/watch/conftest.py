"""A finished job to watch against: the guided job that replays the FAKE chain-model surface
(tests/search/chain_surface.py; its winner is n-gram k=4 at concurrency 1 and 4). Nothing in
it was measured by anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.test_predictions import guided_replay_job


@pytest.fixture(scope="session")
def watched_job(tmp_path_factory) -> tuple[str, int, Path]:
    """(database URL, job id, folder) of the FAKE job."""
    root = tmp_path_factory.mktemp("watched")
    # The surface's model is written "target": a folder of that name makes it a path (without
    # one it is a hub id, and a server loading the folder would be another model).
    (root / "target").mkdir()
    url = f"sqlite:///{root / 'watch.db'}"
    return url, guided_replay_job(root, url), root
