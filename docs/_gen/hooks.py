"""MkDocs hook: fills each ``<!-- generated: NAME -->`` marker with the reference that
``reference.py`` generates from the code (the CLI's parser, the app's OpenAPI document), and
the Web UI page's screenshots from ``docs/img/ui/shots.json`` when ``docs/screenshots.py`` has
taken them from a real-engine job."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")
_spec = importlib.util.spec_from_file_location("spectune_docs_reference", HERE / "reference.py")
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)
_cache: dict[str, str] = {}


def screenshots() -> str:
    """The screenshots ``docs/screenshots.py`` took, with the job they show, or what is missing."""
    manifest = HERE.parent / "img" / "ui" / "shots.json"
    if not manifest.is_file():
        return (
            '!!! note "No screenshots yet"\n'
            "    This page shows screenshots of a real-engine job only. None has been taken\n"
            "    yet: `docs/screenshots.py --db URL --job N` takes them from a database that\n"
            "    holds one (the FAKE-engine pictures of earlier versions are not used here).\n"
        )
    shots = json.loads(manifest.read_text())
    out = [f"Taken by `docs/screenshots.py` from {shots['job']}.", ""]
    for s in shots["shots"]:
        out += [f"**{s['caption']}**", "", f"![{s['caption']}](img/ui/{s['file']})", ""]
    return "\n".join(out)


def generated(name: str) -> str:
    if name not in _cache:
        makers = {**reference.GENERATORS, "screenshots": screenshots}
        if name not in makers:
            raise ValueError(f"unknown generated section {name!r}")
        _cache[name] = makers[name]()
    return _cache[name]


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001
    return MARKER.sub(lambda m: generated(m.group(1)), markdown)
