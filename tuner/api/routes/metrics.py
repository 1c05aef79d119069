"""``/metrics``: the service for Prometheus (jobs by state, trials, engine launches, worker
heartbeat ages, request latencies).

Job, trial and launch numbers are counted in the database at scrape time, so every worker's
work shows whichever process serves the scrape; latencies are this process's own. One
registry per app, so several apps in one process (tests) never share or clash.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tuner.api._deps import Authorized
from tuner.api._openapi import AUTH, responses
from tuner.states import JobState, TrialState
from tuner.storage import Store

__all__ = ["RequestMetrics", "make_registry", "router"]

router = APIRouter(tags=["metrics"])
# Every trial state, Optuna's "waiting" (a trial enqueued but not yet started) included.
TRIAL_STATES = tuple(s.value for s in TrialState)


class _StoreCollector(Collector):
    """Gauges read from the database on every scrape."""

    def __init__(self, url: str) -> None:
        self.url = url

    def collect(self) -> Iterator[Metric]:
        c = Store(self.url).service_counts()
        jobs = GaugeMetricFamily("spectune_jobs", "Jobs by state.", labels=["state"])
        for state in JobState:
            jobs.add_metric([state.value], c.jobs_by_state.get(state, 0))
        yield jobs
        trials = GaugeMetricFamily("spectune_trials", "Trials by state.", labels=["state"])
        for state in sorted({*TRIAL_STATES, *c.trials_by_state}):
            trials.add_metric([state], c.trials_by_state.get(state, 0))
        yield trials
        launches = CounterMetricFamily(
            "spectune_engine_launches", "Engine launches by all jobs.", labels=["kind"]
        )
        launches.add_metric(["search"], c.engine_launches)
        launches.add_metric(["confirm"], c.confirm_launches)
        yield launches
        beat = GaugeMetricFamily(
            "spectune_worker_heartbeat_age_seconds",
            "Seconds since each worker holding a running job last beat.",
            labels=["worker"],
        )
        for worker, age in sorted(c.heartbeat_age_s.items()):
            beat.add_metric([worker], age)
        yield beat


def make_registry(database_url: str) -> tuple[CollectorRegistry, Histogram]:
    """The app's registry and its request-latency histogram."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCollector(database_url))
    latency = Histogram(
        "spectune_http_request_duration_seconds",
        "Request latency by method, route template and status.",
        ["method", "route", "status"],
        registry=registry,
    )
    return registry, latency


class RequestMetrics:
    """Times every HTTP request; labelled by route template (never the raw path, whose ids
    would make a series per job)."""

    def __init__(self, app: ASGIApp, latency: Histogram) -> None:
        self.app, self.latency = app, latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        code = 500
        t0 = time.perf_counter()

        async def send_status(msg: Message) -> None:
            nonlocal code
            if msg["type"] == "http.response.start":
                code = int(msg["status"])
            await send(msg)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None)
            label = route if route else ("static" if code < 400 else "unmatched")
            self.latency.labels(scope.get("method", ""), label, str(code)).observe(
                time.perf_counter() - t0
            )


@router.get(
    "/metrics",
    dependencies=[Authorized],
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}},
        **responses(*AUTH),
    },
)
def metrics(request: Request) -> Response:
    """Prometheus text format; needs a token when auth is on (it counts job data)."""
    registry: CollectorRegistry = request.app.state.metrics_registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
