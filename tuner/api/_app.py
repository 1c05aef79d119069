"""The FastAPI app factory: API routers, the static web UI, and the embedded worker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tuner.api._errors import validation_error_response
from tuner.api.routes import exports, health, jobs, pareto, search_spaces, trials
from tuner.api.settings import ServiceSettings
from tuner.storage import JobNotFound, SchemaOutOfDate, StorageError, Store, TrialNotFound
from tuner.worker import Worker

__all__ = ["create_app"]


class BodyLimit:
    """413 for a request body over ``max_bytes``, whether or not it declares its length.

    Pure ASGI so the body is counted before FastAPI parses (and buffers) it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(body)
            more = msg.get("more_body", False)
        buffered = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": buffered, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        resp = JSONResponse(
            {"detail": f"request body over {self.max_bytes} bytes"}, status_code=413
        )
        await resp({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def create_app(
    settings: ServiceSettings | None = None,
    *,
    run_worker: bool | None = None,
    launcher: list[str] | None = None,
) -> FastAPI:
    """The service. ``run_worker`` defaults to ``settings.embedded_worker``.

    ``launcher`` is for tests only (it replaces vLLM by tests/fake_openai_server.py in the
    embedded worker); no setting or environment variable reaches it.
    """
    settings = settings or ServiceSettings()
    embedded = settings.embedded_worker if run_worker is None else run_worker

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store(settings.database_url)
        await run_in_threadpool(store.ensure_schema)
        worker = None
        if embedded:
            worker = Worker(
                store,
                work_dir=settings.work_dir,
                poll_s=settings.worker_poll_s,
                heartbeat_s=settings.worker_heartbeat_s,
                stale_after_s=settings.worker_stale_after_s,
                launcher=launcher,
            )
            worker.start()
        app.state.worker = worker
        try:
            yield
        finally:
            if worker is not None:
                await run_in_threadpool(worker.stop)

    app = FastAPI(
        title="SpecTune",
        summary="Tune speculative decoding with real engines: jobs, trials, Pareto, export.",
        version="0.2.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.worker = None
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)

    for r in (health, jobs, trials, pareto, exports, search_spaces):
        app.include_router(r.router)

    app.add_exception_handler(RequestValidationError, validation_error_response)

    @app.exception_handler(JobNotFound)
    @app.exception_handler(TrialNotFound)
    async def _not_found(_req: Request, exc: LookupError) -> JSONResponse:
        # The one place a missing job or trial becomes a 404 (the store raises them).
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(SchemaOutOfDate)
    async def _schema(_req: Request, exc: SchemaOutOfDate) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(StorageError)
    async def _storage(_req: Request, exc: StorageError) -> JSONResponse:
        return JSONResponse({"detail": "database unavailable"}, status_code=503)

    if settings.web_dir.is_dir():
        app.mount("/", StaticFiles(directory=settings.web_dir, html=True), name="web")
    return app
