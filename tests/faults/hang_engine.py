"""TESTS ONLY: a FAKE engine that hangs, for the fault tests. It measures nothing.

``--hang start``: never answers ``/health`` (an engine stuck loading); ``--hang requests``:
healthy, but every completion request waits forever (an engine wedged mid-job). It accepts
and ignores the engine's own flags, as tests/fake_openai_server.py does."""

from __future__ import annotations

import argparse
import asyncio
import sys

from aiohttp import web


async def _forever(_req: web.Request) -> web.Response:
    await asyncio.sleep(3600)
    return web.Response(text="")


async def _ok(_req: web.Request) -> web.Response:
    return web.Response(text="")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hang", choices=["start", "requests"], required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args, _ = ap.parse_known_args(sys.argv[1:])
    print(f"hang engine: hangs on {args.hang}", flush=True)
    app = web.Application()
    app.router.add_get("/health", _forever if args.hang == "start" else _ok)
    app.router.add_post("/v1/completions", _forever)
    app.router.add_get("/metrics", _ok)
    app.router.add_post("/reset_prefix_cache", _ok)
    # On SIGTERM, drop the hung requests after 1 s (aiohttp would wait 60 s for them).
    web.run_app(app, host=args.host, port=args.port, print=None, shutdown_timeout=1)


if __name__ == "__main__":
    main()
