"""The FastAPI app factory: API routers, the static web UI, and the embedded worker."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from tuner.api._errors import install_problem_handlers
from tuner.api._limits import BodyLimit, RateLimit
from tuner.api._openapi import install_openapi, operation_id
from tuner.api.routes import (
    exports,
    health,
    importance,
    jobs,
    logs,
    metrics,
    pareto,
    predictions,
    search_spaces,
    trials,
    watches,
)
from tuner.api.settings import ServiceSettings
from tuner.context import MeasurerFactory
from tuner.storage import Store
from tuner.watch import WatchPoller
from tuner.worker import worker_from_settings

__all__ = ["create_app"]


def create_app(
    settings: ServiceSettings | None = None,
    *,
    run_worker: bool | None = None,
    measurers: MeasurerFactory | None = None,
) -> FastAPI:
    """The service. ``run_worker`` defaults to ``settings.embedded_worker``.

    ``measurers`` is for tests only (``tests.helpers.fake_measurers``: the embedded worker
    launches tests/fake_openai_server.py instead of vLLM); no setting or environment variable
    reaches it.
    """
    settings = settings or ServiceSettings()
    embedded = settings.embedded_worker if run_worker is None else run_worker

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store(settings.database_url)
        await run_in_threadpool(store.ensure_schema)
        worker = None
        if embedded:
            worker = worker_from_settings(store, settings, measurers=measurers)
            worker.start()
        app.state.worker = worker
        # The watches' poller: scrapes every registered server and keeps its latest verdict.
        poller = WatchPoller(store, settings.watch_tick_s, settings.watch_url_allowed)
        poller.start()
        app.state.watch_poller = poller
        try:
            yield
        finally:
            await poller.stop()
            if worker is not None:
                await run_in_threadpool(worker.stop)

    app = FastAPI(
        title="SpecTune",
        summary="Tune speculative decoding with real engines: jobs, trials, Pareto, export.",
        version="0.5.0",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
    )
    app.state.settings = settings
    app.state.worker = None
    app.state.metrics_registry, latency = metrics.make_registry(
        settings.database_url, settings.db_retry_s
    )
    # The last added sees a request first: timing, then the client's rate, then body size.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RateLimit, rate=settings.rate_limit_per_s, burst=settings.rate_limit_burst)
    app.add_middleware(metrics.RequestMetrics, latency=latency)

    for r in (
        health,
        metrics,
        jobs,
        trials,
        pareto,
        predictions,
        exports,
        search_spaces,
        logs,
        importance,
        watches,
    ):
        app.include_router(r.router)

    install_problem_handlers(app)
    install_openapi(app)

    if settings.web_dir.is_dir():
        app.mount("/", StaticFiles(directory=settings.web_dir, html=True), name="web")
    else:  # said out loud: an API without its UI looks like a broken install otherwise
        logging.getLogger("spectune").warning("web UI NOT served: no %s", settings.web_dir)
    return app
