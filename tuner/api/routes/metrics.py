"""``/metrics``: the service for Prometheus (jobs by state, trials, engine launches, worker
heartbeat ages, request latencies, and each watch's latest window).

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
from tuner.storage import Store, is_disconnect
from tuner.watch import SWITCH, VERDICT_CODES

__all__ = ["RequestMetrics", "make_registry", "router"]

router = APIRouter(tags=["metrics"])
# Every trial state, Optuna's "waiting" (a trial enqueued but not yet started) included.
TRIAL_STATES = tuple(s.value for s in TrialState)


class _DbCollector(Collector):
    """Reads the database on every scrape, waiting for a restarting server as long as the
    app's requests do (``db_retry_s``), not a worker's two minutes."""

    def __init__(self, url: str, retry_for_s: float) -> None:
        self.url, self.retry_for_s = url, retry_for_s

    def store(self) -> Store:
        store = Store(self.url)
        store.retry_for_s = self.retry_for_s
        return store


class _StoreCollector(_DbCollector):
    """Gauges read from the database on every scrape."""

    def collect(self) -> Iterator[Metric]:
        # An exporter's own "up" gauge (as mysqld_exporter's mysql_up): a scrape while the
        # database restarts answers 0 and no counts, not a 503 that reads as a dead service.
        up = GaugeMetricFamily(
            "spectune_database_up", "1 when this scrape could read the database, else 0."
        )
        try:
            c = self.store().service_counts()
        except Exception as e:
            if not is_disconnect(e):
                raise
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
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


# The watches' gauges, read from each watch's latest window (the alert example in docs/watch.md).
# spectune_watch_verdict: 0 cannot tell yet (also: no window yet, or the server unreadable),
# 1 still pays, 2 switch depth (spectune_watch_recommended_depth says which), 3 turn
# speculation off.
_WATCH_GAUGES = (
    ("acceptance_rate", "spectune_watch_acceptance_rate", "Live acceptance rate (measured)."),
    (
        "mean_acceptance_length",
        "spectune_watch_mean_acceptance_length",
        "Live mean acceptance length, bonus token included (measured).",
    ),
    (
        "live_concurrency",
        "spectune_watch_live_concurrency",
        "Mean running requests over the latest window (measured).",
    ),
    (
        "predicted_speedup",
        "spectune_watch_predicted_speedup",
        "The server's depth over no speculation on the job's first objective, predicted by "
        "the job's model at the live acceptance (not measured).",
    ),
    (
        "recommended_depth",
        "spectune_watch_recommended_depth",
        "Best predicted depth at the live acceptance (0: no speculation).",
    ),
)


class _WatchCollector(_DbCollector):
    """Each watch's latest window as gauges labelled by watch id, job and URL."""

    def collect(self) -> Iterator[Metric]:
        try:
            watches = self.store().watches()
        except Exception as e:
            if not is_disconnect(e):
                raise
            return  # spectune_database_up says why no watch shows

        labels = ["watch", "job", "url"]
        verdict = GaugeMetricFamily(
            "spectune_watch_verdict",
            "Latest verdict: 0 cannot tell yet, 1 still pays, 2 switch depth, 3 turn "
            "speculation off.",
            labels=labels,
        )
        up = GaugeMetricFamily(
            "spectune_watch_up", "1 when the latest scrape of the server worked.", labels=labels
        )
        fams = {
            key: GaugeMetricFamily(name, doc, labels=labels) for key, name, doc in _WATCH_GAUGES
        }
        for w in watches:
            lv = [str(w.id), str(w.job_id), w.url]
            v = w.verdict or ""
            verdict.add_metric(lv, VERDICT_CODES.get(SWITCH if v.startswith(SWITCH) else v, 0))
            up.add_metric(lv, 0.0 if w.last_error else 1.0)
            last = w.last_result or {}
            for key, fam in fams.items():
                if isinstance(last.get(key), int | float) and not w.last_error:
                    fam.add_metric(lv, float(last[key]))
        yield verdict
        yield up
        yield from fams.values()


def make_registry(database_url: str, retry_for_s: float) -> tuple[CollectorRegistry, Histogram]:
    """The app's registry and its request-latency histogram."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCollector(database_url, retry_for_s))
    registry.register(_WatchCollector(database_url, retry_for_s))
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
