"""Build step (everything else is in pyproject.toml): the wheel carries the repository's
top-level ``migrations/``, ``web/`` and ``search_spaces/`` as ``tuner/_data/<name>``.

Why a build step: the folders stay top-level in the repository, and ``tuner/_resources.py``
finds them in either place. An editable install reads them from the checkout instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# Keep in step with tuner/_resources.py DATA_DIRS (tests/packaging/test_wheel.py checks it).
DATA_DIRS = ("migrations", "web", "search_spaces")


class BuildPyWithData(build_py):
    """``build_py``, then copy each data folder into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in DATA_DIRS:
            src = ROOT / name
            if not src.is_dir():
                raise FileNotFoundError(f"{src}: a wheel without it would not work")
            shutil.copytree(
                src,
                Path(self.build_lib) / "tuner" / "_data" / name,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )


setup(cmdclass={"build_py": BuildPyWithData})
