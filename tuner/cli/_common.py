"""What every command shares: exit codes, error lines, JSON output, a URL and user strings
fit to print, aligned tables."""

from __future__ import annotations

import json
import sys
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

__all__ = [
    "EXIT_FAIL",
    "EXIT_INFEASIBLE",
    "EXIT_INPUT",
    "EXIT_OK",
    "err",
    "fmt",
    "print_json",
    "printable",
    "shown",
    "table",
]

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3


def err(msg: str) -> None:
    print(f"spectune: error: {msg}", file=sys.stderr)


def shown(url: str) -> str:
    """A database URL as output may show it: the password masked (logs are read by many)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def printable(s: str) -> str:
    """``s`` with control and other unprintable characters escaped as ``repr`` writes them
    (``\\n``, ``\\x00``, ``\\u202e``): a job or workload name is user input, and a raw newline,
    NUL or escape sequence would break a table's rows or drive the terminal."""
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def fmt(v: Any, spec: str = ".1f") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def table(rows: list[list[str]], header: list[str]) -> str:
    """Aligned columns; every cell passes through ``printable``."""
    rows = [[printable(c) for c in r] for r in rows]
    header = [printable(h) for h in header]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)
