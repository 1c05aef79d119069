"""Every storage test runs on SQLite and on a real PostgreSQL server (tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url
