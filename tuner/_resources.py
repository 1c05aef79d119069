"""Where the data SpecTune ships lives: Alembic migrations, the web UI, preset search spaces.

Why one module: in a checkout (and an editable install) they are the repository's top-level
folders; in a wheel they are package data under ``tuner/_data/`` (``setup.py`` copies them
there at build time). Every caller asks here, so neither layout is assumed anywhere else.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIRS", "migrations_dir", "resource_dir", "search_spaces_dir", "web_dir"]

# The top-level folders a wheel carries as ``tuner/_data/<name>`` (setup.py reads this too).
DATA_DIRS = ("migrations", "web", "search_spaces")

_PKG = Path(__file__).resolve().parent
_BUNDLED = _PKG / "_data"
_CHECKOUT = _PKG.parent


def resource_dir(name: str) -> Path:
    """The folder ``name`` (one of DATA_DIRS): bundled in the wheel, else the checkout's.

    A path that does not exist is returned as is (the bundled one) so callers can say what
    is missing where; nothing here falls back silently to another folder.
    """
    if name not in DATA_DIRS:
        raise ValueError(f"{name!r} is not shipped data (one of {', '.join(DATA_DIRS)})")
    bundled = _BUNDLED / name
    if bundled.is_dir():
        return bundled
    # A checkout: the package sits next to pyproject.toml and the top-level folders.
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / name).is_dir():
        return _CHECKOUT / name
    return bundled


def migrations_dir() -> Path:
    return resource_dir("migrations")


def web_dir() -> Path:
    return resource_dir("web")


def search_spaces_dir() -> Path:
    return resource_dir("search_spaces")
