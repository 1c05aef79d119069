"""What a job may add to an engine's command line, checked before anything launches.

Why an allow-list: the argv is a list (no shell), but the engine's own parser still obeys
whatever flags it is given, and a submitter's ``--host 0.0.0.0`` or ``--api-key`` would be
obeyed, too. So a job's extra arguments are only flags this module names for that engine,
each value checked against its kind; flags SpecTune sets itself (model, name, host, port,
speculative config, the searched parameters) are never among them. Abbreviations and short
forms never match: only the exact ``--flag`` and ``--flag=value`` spellings listed pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

__all__ = [
    "DTYPES",
    "SERVED_NAME_PATTERN",
    "FlagValue",
    "flag_problems",
    "served_name_problem",
]

# A flag's value: None for a switch, a kind of number, or the choices it accepts.
FlagValue = Literal["int", "number"] | frozenset[str] | None

# What ``--dtype`` may say, for every engine SpecTune launches.
DTYPES: frozenset[str] = frozenset({"auto", "float16", "bfloat16", "float32", "half", "float"})

# The name clients send as ``model``: letters, digits and ``._/-``, not starting with a
# punctuation mark (so never a flag or an absolute path).
SERVED_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"

_SERVED_NAME = re.compile(SERVED_NAME_PATTERN)
_INT = re.compile(r"^[0-9]{1,10}$")
_NUMBER = re.compile(r"^[0-9]{1,10}(?:\.[0-9]{1,10})?$")
_MAX_TOKEN = 200


def served_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a served model name, or None."""
    if _SERVED_NAME.fullmatch(name):
        return None
    return (
        "must be 1 to 128 letters, digits or ._/- and start with a letter or digit "
        f"(pattern {SERVED_NAME_PATTERN})"
    )


def _value_problem(flag: str, spec: FlagValue, value: str) -> str | None:
    if spec == "int":
        ok = bool(_INT.fullmatch(value))
        kind = "a whole number"
    elif spec == "number":
        ok = bool(_NUMBER.fullmatch(value))
        kind = "a number such as 4 or 0.5"
    else:
        choices = spec or frozenset()
        ok = value in choices
        kind = f"one of {', '.join(sorted(choices))}"
    return None if ok else f"{flag} takes {kind}, not {value[:40]!r}"


def _shown(token: str) -> str:
    return repr(token if len(token) <= 40 else token[:40] + "...")


def flag_problems(flags: Mapping[str, FlagValue], args: Sequence[str]) -> list[tuple[int, str]]:
    """(index in ``args``, why) for each argument the allow-list ``flags`` refuses.

    Each argument is a listed ``--flag``, a ``--flag=value``, or the value right after a
    listed flag that takes one; anything else (positional words, short or abbreviated flags,
    a flag SpecTune sets itself) is refused."""
    allowed = ", ".join(sorted(flags)) or "none"
    problems: list[tuple[int, str]] = []
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, inline = token.partition("=")
        if len(token) > _MAX_TOKEN:
            problems.append((i, f"longer than {_MAX_TOKEN} characters"))
            i += 1
            continue
        if not name.startswith("--"):
            problems.append(
                (i, f"{_shown(token)} is not a --flag; extra_args takes only allowed flags")
            )
            i += 1
            continue
        if name not in flags:
            problems.append((i, f"flag {_shown(name)} is not allowed here; allowed: {allowed}"))
            i += 1
            if not eq and i < len(args) and not args[i].startswith("-"):
                i += 1  # its value: the flag is refused already, one error is enough
            continue
        spec = flags[name]
        if spec is None:
            if eq:
                problems.append((i, f"{name} is a switch and takes no value"))
            i += 1
            continue
        if eq:
            at, value = i, inline
            i += 1
        elif i + 1 < len(args):
            at, value = i + 1, args[i + 1]
            i += 2
        else:
            problems.append((i, f"{name} needs a value"))
            break
        if len(value) > _MAX_TOKEN:
            problems.append((at, f"longer than {_MAX_TOKEN} characters"))
        elif (why := _value_problem(name, spec, value)) is not None:
            problems.append((at, why))
    return problems
