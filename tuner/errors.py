"""What a request asked wrongly, said apart from how it is answered: the core and the API's
services raise these, ``tuner.api._errors`` maps each to one HTTP status (404, 409, 422) and
the CLI to an exit code and a line on stderr.

Standard library only, so any layer (the storage too) may raise them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Conflict", "FieldProblem", "InvalidInput", "NotFound", "RequestError"]


class RequestError(Exception):
    """A request refused for what it asked, not a fault: its message is for the caller."""


class NotFound(RequestError, LookupError):
    """What the request names does not exist (a job, a trial): HTTP 404."""


class Conflict(RequestError):
    """The request is well formed but what it names cannot do it now (a job already ended,
    nothing feasible to export, a key used with another body): HTTP 409."""


@dataclass(frozen=True)
class FieldProblem:
    """One refused field: where (``("query", "concurrency")``), why, and a kind."""

    loc: tuple[str | int, ...]
    msg: str
    type: str = "value_error"


class InvalidInput(RequestError):
    """Fields of the request that cannot be used, each with its path and reason: HTTP 422
    with one ``{loc, msg, type}`` per field; its message is the reasons joined by ``; ``."""

    def __init__(self, problems: Sequence[FieldProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(p.msg for p in self.problems))

    @classmethod
    def field(cls, loc: Sequence[str | int], msg: str, kind: str = "value_error") -> InvalidInput:
        """One field refused."""
        return cls([FieldProblem(tuple(loc), msg, kind)])
