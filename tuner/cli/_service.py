"""``spectune serve`` and ``spectune worker``: the long-running service processes."""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import ValidationError

from tuner._repeated import first_line
from tuner.api import ServiceSettings, create_app
from tuner.cli._common import EXIT_FAIL, EXIT_INPUT, EXIT_OK, err, shown
from tuner.storage import (
    RETRY_FOR_S,
    StorageError,
    Store,
    database_url,
    is_disconnect,
    retry_call,
)
from tuner.worker import worker_from_settings

__all__ = ["cmd_serve", "cmd_worker", "uvicorn_options"]


def _service_settings(args: argparse.Namespace, **extra: Any) -> ServiceSettings | None:
    """Environment (SPECTUNE_*) first, then the flags given; unsafe settings are refused."""
    given: dict[str, Any] = {"database_url": database_url(args.db), **extra}
    if getattr(args, "work_dir", None):
        given["work_dir"] = Path(args.work_dir)
    try:
        return ServiceSettings(**given)
    except ValidationError as e:
        for e_ in e.errors():
            err(e_["msg"].removeprefix("Value error, "))
        return None


def cmd_serve(args: argparse.Namespace) -> int:
    """API + web UI + (unless --no-worker) an embedded worker, in one process."""
    extra: dict[str, Any] = {"embedded_worker": not args.no_worker}
    if args.host is not None:
        extra["host"] = args.host
    if args.port is not None:
        extra["port"] = args.port
    if args.allow_unauthenticated_remote:
        extra["allow_unauthenticated_remote"] = True
    settings = _service_settings(args, **extra)
    if settings is None:
        return EXIT_INPUT
    _ensure_schema(Store(settings.database_url))  # refuse an out-of-date database first
    if not (settings.web_dir / "index.html").is_file():
        # Loud: a server without its UI otherwise looks like a broken page, not a broken install.
        print(
            f"spectune: WARNING: web UI NOT served: no index.html in {settings.web_dir} "
            "(reinstall SpecTune, or point SPECTUNE_WEB_DIR at the web/ folder); the API "
            "works",
            file=sys.stderr,
            flush=True,
        )
    taken = _listen_problem(settings.host, settings.port)
    if taken is not None:
        err(taken)
        return EXIT_FAIL
    stored = Store(settings.database_url).token_state(None)[0]  # tokens from `spectune token`
    auth = "on" if settings.auth_enabled or stored else "off (loopback only)"
    print(
        f"spectune: serving http://{settings.host}:{settings.port}/ (auth {auth}, worker "
        f"{'embedded' if settings.embedded_worker else 'separate'}, database "
        f"{shown(settings.database_url)})",
        file=sys.stderr,
        flush=True,
    )
    try:
        uvicorn.run(create_app(settings), **uvicorn_options(settings))
    except SystemExit as e:  # uvicorn's start-up failure is 3, our "nothing feasible"
        if e.code in (0, None):
            raise
        err(f"could not serve on {_where(settings.host, settings.port)} (uvicorn's error above)")
        return EXIT_FAIL
    return EXIT_OK


def _ensure_schema(store: Store, wait_s: float = RETRY_FOR_S) -> None:
    """The schema check, waiting up to ``wait_s`` for a database server that is restarting
    or failing over: a service restarted at that moment exited instead (found by
    bench/soak.py). Any other error, and a server still away after ``wait_s``, raises."""

    def say(e: Exception, wait: float) -> None:
        print(f"spectune: database unreachable; trying again ({first_line(e)})", file=sys.stderr)

    retry_call(
        store.ensure_schema,
        retry_if=lambda e: isinstance(e, StorageError) and is_disconnect(e),
        for_s=wait_s,
        on_retry=say,
    )


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen_problem(host: str, port: int) -> str | None:
    """Why uvicorn could not listen on ``host:port``, or None; bound and let go as asyncio
    binds (SO_REUSEADDR, IPv6 only on IPv6). Found before the app starts, so its embedded
    worker never claims a job only to be stopped a moment later."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"cannot serve on {_where(host, port)}: {e.strerror}"
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind(addr)
            except OSError as e:
                why = (e.strerror or str(e)).lower()
                return (
                    f"cannot serve on {_where(host, port)}: {why} (another server there? "
                    "choose another --port or SPECTUNE_PORT)"
                )
    return None


def uvicorn_options(settings: ServiceSettings) -> dict[str, Any]:
    """uvicorn's keywords for ``settings``. Proxy headers only from ``trusted_proxies``:
    uvicorn's default believes X-Forwarded-For from 127.0.0.1, so any local client could
    pick the address the rate limit counts it under, a new one with each request."""
    proxies = list(settings.trusted_proxies)
    return {
        "host": settings.host,
        "port": settings.port,
        "log_level": "info",
        "proxy_headers": bool(proxies),
        "forwarded_allow_ips": proxies or None,
    }


def cmd_worker(args: argparse.Namespace) -> int:
    """A worker alone: claims queued API jobs one at a time (one worker per device)."""
    settings = _service_settings(args)
    if settings is None:
        return EXIT_INPUT
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("spectune").setLevel(logging.INFO)
    store = Store(settings.database_url)
    _ensure_schema(store)
    w = worker_from_settings(store, settings, devices=args.devices)
    devices = f", devices {args.devices}" if args.devices else ""
    print(
        f"spectune: worker {w.worker_id} on {shown(settings.database_url)}{devices}",
        file=sys.stderr,
    )
    if w.run_until_signal(once=args.once):
        # SIGTERM or Ctrl-C: the trial in flight was aborted, recorded and put back.
        err("stopped; a trial in flight was put back to run again, its job back in the queue")
        return 130
    if args.once:
        job = w.last_job
        print("no queued job" if job is None else f"ran job {job}", file=sys.stderr)
    return EXIT_OK
