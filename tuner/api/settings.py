"""Service settings (``SPECTUNE_*`` environment variables, or arguments of ``spectune serve``).

Unsafe combinations are refused at start-up rather than served: a server with no tokens on an
address other than loopback needs ``require_auth`` (tokens kept in the database, made by
``spectune token create``) or ``allow_unauthenticated_remote`` said out loud, and tokens are
only ever configured as SHA-256 digests (a plaintext token in the environment would leak
through ``ps``, crash reports and the like).

Paths a submitted job names (models, drafts, heads, workload files, a replay surface) must
resolve, symlinks followed, inside ``search_spaces_dir``, the repository's ``models/`` or a
folder in ``path_roots``; otherwise a submitter could have the worker read any file the
service can.

A job submitted through the API runs with the service's environment, so its ``hosted:``
references may only name the key variables in ``hosted_api_key_envs`` and the hosts in
``hosted_hosts`` (both empty by default: no hosted reference through the API). Otherwise a
submitter could have the worker send any variable's value, as a bearer token, to a host of
their choosing. The CLI runs the user's own file with the user's own environment and is not
restricted.

A watch (``POST /api/watches``) has the service scrape ``/metrics`` and ``/v1/models`` of the
URL it names, from the service's own network: only loopback and the hosts in ``watch_hosts``
(none by default), so a token holder cannot make the service probe the cluster's internal
addresses (server-side request forgery).

``X-Forwarded-For`` is believed only from the peers in ``trusted_proxies`` (none by default):
otherwise any client on the host could name a new address with each request and so get a
fresh rate-limit budget every time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tuner import _resources
from tuner.storage import DEFAULT_DATABASE_URL

__all__ = ["REPO_DIR", "ServiceSettings", "hash_token", "token_matches"]

REPO_DIR = Path(__file__).resolve().parents[2]
# An API request is answered within this; a longer wait belongs to the worker, not a client.
_MAX_DB_RETRY_S = 60.0
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")
# What a hosted base_url must look like to be checked at all: scheme, host, optional port and
# a plain path. No user info, query, fragment, backslash or space, which URL parsers disagree
# on (the host one parser sees is not always the host another connects to).
_PLAIN_URL = re.compile(
    r"^https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%/-]*)?$"
)


def hash_token(token: str) -> str:
    """The digest to put in ``SPECTUNE_API_TOKEN_SHA256`` for a bearer token."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, digests: tuple[str, ...]) -> bool:
    """Constant time in the token and over every configured digest (no early exit)."""
    presented = hash_token(token)
    ok = False
    for d in digests:
        ok |= hmac.compare_digest(presented, d)
    return ok


def _split_list(v: Any) -> Any:
    if isinstance(v, str):
        return tuple(x.strip() for x in v.split(",") if x.strip())
    return v


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServiceSettings(BaseSettings):
    """Everything ``spectune serve`` and ``spectune worker`` need; frozen once loaded."""

    model_config = SettingsConfigDict(env_prefix="SPECTUNE_", frozen=True, extra="forbid")

    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    api_token_sha256: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="SHA-256 hex digests of the accepted bearer tokens, comma-separated. "
        "Empty: auth off (then the server binds to loopback only).",
    )
    require_auth: bool = Field(
        False,
        description="Refuse job data without a valid token even before any token exists "
        "(tokens from `spectune token create`). Auth is also on whenever a token exists.",
    )
    allow_unauthenticated_remote: bool = False
    embedded_worker: bool = True
    work_dir: Path = Path(".spectune")
    # Bundled in the wheel or the checkout's folders (tuner/_resources.py).
    search_spaces_dir: Path = _resources.search_spaces_dir()
    web_dir: Path = _resources.web_dir()
    max_body_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 256 * 1024
    rate_limit_per_s: Annotated[float, Field(ge=0, le=100_000)] = Field(
        20.0, description="Requests per second each client may make to /api (0: no limit)."
    )
    rate_limit_burst: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        120, description="Requests a client may make at once before the per-second rate."
    )
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Addresses or networks of reverse proxies whose X-Forwarded-For is "
        "believed (the rate limit then counts the client it names), comma-separated; '*' for "
        "any peer. Empty: the header is ignored and each client is its TCP peer.",
    )
    path_roots: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(),
        description="More folders a submitted job's model, workload and surface paths may "
        "lie in, comma-separated (search_spaces_dir and the repository's models/ always).",
    )
    max_input_file_bytes: Annotated[int, Field(ge=1, le=2**40)] = Field(
        256 * 1024 * 1024, description="Largest workload or surface file a job may name."
    )
    db_retry_s: Annotated[float, Field(allow_inf_nan=False)] = Field(
        3.0,
        description="How long an API request waits for an unreachable database before it "
        "answers 503 (0: no retry). The worker keeps the storage layer's long retry, so a "
        "running job rides out a database restart.",
    )
    worker_poll_s: Annotated[float, Field(gt=0, le=60)] = 2.0
    # How often the watch poller looks at its watches (a watch scrapes its server every
    # min(5 s, interval/6) and closes a window every interval_s; SPECTUNE_WATCH_TICK_S).
    watch_tick_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    worker_heartbeat_s: Annotated[float, Field(gt=0, le=300)] = 5.0
    worker_stale_after_s: Annotated[float, Field(gt=0, le=3600)] = 60.0
    hosted_api_key_envs: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Environment variables a submitted job's hosted.N.api_key_env may name, "
        "comma-separated. Empty: none.",
    )
    hosted_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Hosts a submitted job's hosted.N.base_url may point at, comma-separated; "
        "host (any port) or host:port. Empty: no hosted reference through the API.",
    )

    watch_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Hosts a watch's url may point at besides loopback, comma-separated; "
        "host (any port) or host:port. Empty: loopback only.",
    )

    @field_validator(
        "api_token_sha256",
        "hosted_api_key_envs",
        "hosted_hosts",
        "watch_hosts",
        "path_roots",
        "trusted_proxies",
        mode="before",
    )
    @classmethod
    def _split(cls, v: Any) -> Any:
        return _split_list(v)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for entry in v:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted_proxies: {entry!r} is not an IP address or network "
                    "(SPECTUNE_TRUSTED_PROXIES)"
                ) from None
        return v

    @field_validator("hosted_api_key_envs")
    @classmethod
    def _env_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return v

    @field_validator("hosted_hosts", "watch_hosts")
    @classmethod
    def _hosts(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for host in v:
            if not _HOST.fullmatch(host):
                raise ValueError(f"{host!r}: give a host or host:port, no scheme or path")
        return tuple(h.lower() for h in v)

    @field_validator("db_retry_s")
    @classmethod
    def _db_retry(cls, v: float) -> float:
        if not 0 <= v <= _MAX_DB_RETRY_S:
            raise ValueError(
                f"db_retry_s: must be 0 to {_MAX_DB_RETRY_S:g} seconds (SPECTUNE_DB_RETRY_S), "
                f"not {v:g}"
            )
        return v

    @field_validator("api_token_sha256")
    @classmethod
    def _digests(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for d in v:
            if not _HEX64.match(d):
                raise ValueError(
                    "each entry must be a SHA-256 hex digest (64 lower-case hex characters), "
                    'not the token itself: printf %s "$TOKEN" | sha256sum'
                )
        return v

    @model_validator(mode="after")
    def _safe(self) -> ServiceSettings:
        if not self.auth_enabled and not _is_loopback(self.host):
            if not self.allow_unauthenticated_remote:
                raise ValueError(
                    f"host: refusing to serve {self.host} without auth; set "
                    "SPECTUNE_REQUIRE_AUTH=true (tokens from `spectune token create`) or "
                    "SPECTUNE_API_TOKEN_SHA256, bind to 127.0.0.1, or set "
                    "SPECTUNE_ALLOW_UNAUTHENTICATED_REMOTE=true if the network is trusted"
                )
        if self.worker_stale_after_s <= 2 * self.worker_heartbeat_s:
            raise ValueError("worker_stale_after_s: must exceed two worker_heartbeat_s")
        return self

    @property
    def auth_enabled(self) -> bool:
        """Auth on whatever the database holds (it is also on once a token is stored)."""
        return bool(self.api_token_sha256) or self.require_auth

    @property
    def roots(self) -> tuple[Path, ...]:
        """Folders a submitted job's paths must resolve into."""
        base = (self.search_spaces_dir, REPO_DIR / "models", *self.path_roots)
        return tuple(dict.fromkeys(p.resolve() for p in base))

    def hosted_url_allowed(self, url: str) -> bool:
        """Whether a submitted job may measure ``url``: a plain URL on a configured host."""
        if not _PLAIN_URL.fullmatch(url):
            return False
        return _on_hosts(url, self.hosted_hosts)

    def watch_url_allowed(self, url: str) -> bool:
        """Whether the service may scrape ``url`` for a watch: loopback, or a configured
        host (``watch_hosts``)."""
        host = (urlsplit(url).hostname or "").lower()
        return bool(host) and (_is_loopback(host) or _on_hosts(url, self.watch_hosts))


def _on_hosts(url: str, hosts: tuple[str, ...]) -> bool:
    """Whether ``url``'s host, or host:port, is one of ``hosts``."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if not host:
        return False
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port over 65535
        return False
    shown = f"[{host}]" if ":" in host else host
    return shown in hosts or f"{shown}:{port}" in hosts
