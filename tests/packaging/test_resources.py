"""tuner/_resources.py: the shipped folders come from the wheel when it carries them, from the
checkout otherwise, and every user of them asks there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner import _resources
from tuner.api.settings import ServiceSettings
from tuner.storage import MIGRATIONS_DIR

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_reads_its_top_level_folders():
    assert not (REPO / "tuner" / "_data").exists()  # built into wheels only, never committed
    assert _resources.migrations_dir() == REPO / "migrations"
    assert _resources.web_dir() == REPO / "web"
    assert _resources.search_spaces_dir() == REPO / "search_spaces"
    assert MIGRATIONS_DIR == REPO / "migrations"
    s = ServiceSettings()
    assert (s.web_dir, s.search_spaces_dir) == (REPO / "web", REPO / "search_spaces")


def test_bundled_data_wins_and_a_missing_folder_is_not_replaced(tmp_path, monkeypatch):
    (tmp_path / "web").mkdir()
    monkeypatch.setattr(_resources, "_BUNDLED", tmp_path)
    assert _resources.web_dir() == tmp_path / "web"
    # Not bundled: the checkout's, when this is a checkout ...
    assert _resources.migrations_dir() == REPO / "migrations"
    # ... and neither: the bundled path, missing, for the caller to report.
    monkeypatch.setattr(_resources, "_CHECKOUT", tmp_path / "site-packages")
    assert _resources.migrations_dir() == tmp_path / "migrations"
    assert not _resources.migrations_dir().exists()


def test_only_shipped_folders_are_resources():
    with pytest.raises(ValueError, match="not shipped data"):
        _resources.resource_dir("models")
