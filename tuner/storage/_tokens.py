"""API bearer tokens, stored as SHA-256 digests only (the token is shown once, at creation).

Why digests: a copy of the database (a backup, a support bundle) must not be enough to call
the API. Revoked rows are kept, so revoking the last token never turns auth off again: auth
is on once any token was ever created in this database.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import DateTime, Integer, String, func, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from tuner.storage._models import Base, utcnow
from tuner.storage._retry import no_retry, retry_db

__all__ = [
    "TOKEN_PREFIX",
    "ApiTokenModel",
    "TokenError",
    "TokenInfo",
    "TokenNotFound",
    "TokenQueries",
    "token_digest",
]

# Every generated token starts with this, so logs can be scrubbed of them by shape.
TOKEN_PREFIX = "spt_"
TOKEN_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$")


class ApiTokenModel(Base):
    """One bearer token: its digest, a name to revoke it by, and when it was revoked."""

    __tablename__ = "spectune_api_tokens"

    token_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class TokenError(ValueError):
    """Bad token input (the message names the field)."""


class TokenNotFound(LookupError):
    pass


@dataclass(frozen=True)
class TokenInfo:
    id: int
    name: str
    created_at: datetime
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _info(row: ApiTokenModel) -> TokenInfo:
    return TokenInfo(row.token_id, row.name, row.created_at, row.revoked_at)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenQueries:
    """Mixin of ``Store`` (which supplies ``session()``). Tried once: a token write tried
    again after a lost connection could report a name its first attempt took, and a request's
    auth check answers now rather than after the store's long retry."""

    session: Callable[[], AbstractContextManager[Session]]

    @no_retry
    def create_token(self, name: str | None = None) -> tuple[TokenInfo, str]:
        """A new token (info, the token itself); the token is not kept, only its digest."""
        if name is not None and not TOKEN_NAME.fullmatch(name):
            raise TokenError(
                f"--name: {name!r} must start with a letter, then letters, digits, ._-"
            )
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self.session() as s:
            if name is None:
                n = (s.scalar(select(func.max(ApiTokenModel.token_id))) or 0) + 1
                name = f"token-{n}"
            if s.scalar(select(ApiTokenModel.token_id).where(ApiTokenModel.name == name)):
                raise TokenError(f"--name: a token named {name!r} already exists")
            row = ApiTokenModel(name=name, sha256=token_digest(token), created_at=utcnow())
            s.add(row)
            s.flush()
            return _info(row), token

    @no_retry
    def list_tokens(self) -> list[TokenInfo]:
        with self.session() as s:
            return [_info(r) for r in s.scalars(select(ApiTokenModel).order_by("token_id"))]

    @no_retry
    def revoke_token(self, name_or_id: str) -> TokenInfo:
        """Revoke by name, or by id when given digits; effective on the next request."""
        with self.session() as s:
            q = select(ApiTokenModel).where(ApiTokenModel.name == name_or_id)
            row = s.scalars(q).first()
            if row is None and name_or_id.isdigit():
                row = s.get(ApiTokenModel, int(name_or_id))
            if row is None:
                raise TokenNotFound(f"no token named or numbered {name_or_id!r}")
            if row.revoked_at is None:
                row.revoked_at = utcnow()
            return _info(row)

    @retry_db
    def token_state(self, presented: str | None) -> tuple[bool, bool]:
        """(any token was ever created here, ``presented`` is an active one), in one session.

        The digest is looked up by equality and compared again in constant time. Retried
        like every read: the API asks it before every request, so tried once it answered
        503 to whatever request met a database restart (found by bench/soak.py)."""
        digest = token_digest(presented) if presented else ""
        with self.session() as s:
            exists = s.scalar(select(ApiTokenModel.token_id).limit(1)) is not None
            if not exists or not presented:
                return exists, False
            row = s.scalars(
                select(ApiTokenModel).where(
                    ApiTokenModel.sha256 == digest, ApiTokenModel.revoked_at.is_(None)
                )
            ).first()
            return True, row is not None and hmac.compare_digest(row.sha256, digest)
