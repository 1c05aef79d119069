"""The shell examples of the docs, read from their Markdown: every ```console block, its
``$ `` commands (a trailing backslash continues a line), the output printed under each, and
the marker the page puts on the line before the block:

    <!-- docs-test: not-run: REASON -->   the block needs a real engine, a GPU or changes the
                                          machine; it is listed in NOT_RUN, never executed
    <!-- docs-test: measured-job -->      run against a job measured by an engine (the FAKE one
                                          of the tests), for what a replayed job refuses: export
    <!-- docs-test: exit N -->            the last command of the block exits N

Outputs are compared by shape (``same_shape``): JSON by its keys and value types, text line by
line with every number replaced, so timings and measured values may differ."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
MARKER = re.compile(r"^<!-- docs-test: (.+?) -->$")
FENCE = re.compile(r"^(`{3,})(\S*)\s*$")
NUMBER = re.compile(r"[-+]?\d+(?:[.,:]\d+)*")
ELISION = "..."


@dataclass
class Command:
    line: int
    text: str
    output: list[str] = field(default_factory=list)


@dataclass
class Block:
    page: Path
    line: int
    marker: str
    commands: list[Command]
    language: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def not_run(self) -> str | None:
        return (
            self.marker.removeprefix("not-run:").strip()
            if self.marker.startswith("not-run:")
            else None
        )

    @property
    def exit_code(self) -> int:
        m = re.fullmatch(r"exit (\d+)", self.marker)
        return int(m.group(1)) if m else 0


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` with its marker; commands only for console blocks."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        i += 1
        prev = next((x.strip() for x in reversed(lines[:start]) if x.strip()), "")
        mk = MARKER.match(prev)
        found.append(
            Block(page, start + 1, mk.group(1) if mk else "", _commands(body, start), lang)
        )
    return found


def _commands(body: list[str], start: int) -> list[Command]:
    cmds: list[Command] = []
    j = 0
    while j < len(body):
        line = body[j]
        if line.startswith("$ "):
            text, first = line[2:], j
            while text.rstrip().endswith("\\") and j + 1 < len(body):
                j += 1
                text = text.rstrip()[:-1] + " " + body[j].strip()
            cmds.append(Command(start + 2 + first, text))
        elif cmds:
            cmds[-1].output.append(line)
        j += 1
    return cmds


def console_blocks(pages: list[Path] = PAGES) -> list[Block]:
    return [b for p in pages for b in blocks(p) if b.language == "console"]


def normalise(text: str) -> list[str]:
    """Lines with numbers as ``#`` and runs of spaces as one; the checkout's path removed."""
    text = text.replace(str(REPO) + "/", "")
    return [" ".join(NUMBER.sub("#", ln).split()) for ln in text.splitlines() if ln.strip()]


def _json_shape(doc, got, at: str) -> list[str]:
    if doc is None:
        return []
    if isinstance(doc, bool) or isinstance(got, bool):
        return [] if type(doc) is type(got) else [f"{at}: {got!r} is not a {type(doc).__name__}"]
    if isinstance(doc, int | float):
        ok = isinstance(got, int | float)
        return [] if ok else [f"{at}: {got!r} is not a number"]
    if isinstance(doc, dict):
        if not isinstance(got, dict):
            return [f"{at}: not an object"]
        out = [f"{at}.{k}: missing" for k in doc if k not in got]
        for k in doc:
            if k in got:
                out += _json_shape(doc[k], got[k], f"{at}.{k}")
        return out
    if isinstance(doc, list):
        if not isinstance(got, list):
            return [f"{at}: not a list"]
        if doc and got:
            return _json_shape(doc[0], got[0], f"{at}[0]")
        return []
    return [] if isinstance(got, type(doc)) else [f"{at}: {got!r} is not a {type(doc).__name__}"]


def _line_matches(documented: str, got: str) -> bool:
    """Equal, or a documented line cut short with ``...`` that starts the output's line."""
    if documented.endswith(ELISION):
        return got.startswith(documented[: -len(ELISION)])
    return documented == got


def same_shape(documented: list[str], got: str) -> list[str]:
    """Why ``got`` does not have the documented output's shape (empty when it has)."""
    text = "\n".join(documented).strip()
    if not text:
        return []
    try:
        doc = json.loads(text)
    except ValueError:
        doc = ELISION
    if doc is not ELISION:
        try:
            return _json_shape(doc, json.loads(got), "$")
        except ValueError:
            return ["documented JSON, got text: " + got[:200]]
    want = [ln for ln in normalise(text) if ln != ELISION]
    have = normalise(got)
    k = 0
    for ln in want:
        while k < len(have) and not _line_matches(ln, have[k]):
            k += 1
        if k == len(have):
            return [f"documented line not in the output (in order): {ln!r}"]
        k += 1
    return []
