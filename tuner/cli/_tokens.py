"""``spectune token create|list|revoke``: bearer tokens for the service, kept in the database
as SHA-256 digests. ``create`` prints the token once; nothing can show it again."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tuner.cli._common import EXIT_INPUT, EXIT_OK, err, print_json, printable
from tuner.storage import (
    Store,
    TokenError,
    TokenInfo,
    TokenNotFound,
    database_url,
)

__all__ = ["add_token_parser"]


def _row(t: TokenInfo) -> dict[str, Any]:
    return {
        "id": t.id,
        "name": t.name,
        "created_at": t.created_at.isoformat(timespec="seconds") + "Z",
        "revoked_at": None
        if t.revoked_at is None
        else t.revoked_at.isoformat(timespec="seconds") + "Z",
    }


def _note(msg: str) -> None:
    """Progress on stderr, so stdout holds only the token (``TOKEN=$(spectune token create)``)."""
    print(f"spectune: {msg}", file=sys.stderr)


def _token(args: argparse.Namespace) -> int:
    url = database_url(args.db)
    Store(url).ensure_schema()
    try:
        if args.action == "create":
            info, token = Store(url).create_token(args.name)
            print(token)
            _note(
                f"created token {info.name!r} (id {info.id}); it is shown only now. "
                "Send it as 'Authorization: Bearer <token>'; auth is on from now on"
            )
        elif args.action == "revoke":
            if not args.target:
                err("revoke: give the token's NAME or ID")
                return EXIT_INPUT
            info = Store(url).revoke_token(args.target)
            _note(f"revoked token {info.name!r} (id {info.id}); it fails from its next request")
        elif args.json:
            print_json([_row(t) for t in Store(url).list_tokens()])
        else:
            for t in Store(url).list_tokens():
                r = _row(t)
                state = "active" if t.active else f"revoked {r['revoked_at']}"
                print(f"{t.id:>4}  {printable(t.name):<30} created {r['created_at']}  {state}")
    except (TokenError, TokenNotFound) as e:
        err(str(e))
        return EXIT_INPUT
    return EXIT_OK


def add_token_parser(sub: Any, db_help: str) -> None:
    """Register ``spectune token`` on the CLI's subparsers."""
    p = sub.add_parser("token", help="create, list or revoke API bearer tokens")
    p.add_argument("action", choices=["create", "list", "revoke"])
    p.add_argument("target", nargs="?", help="revoke: the token's name or id")
    p.add_argument("--name", help="create: a name to revoke it by (default token-N)")
    p.add_argument("--json", action="store_true", help="list: as JSON")
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=_token)
