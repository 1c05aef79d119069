"""A light, tolerant client for pipelines: submit a job, wait for it, read the front, export.

    from tuner.client import SpecTuneClient
    with SpecTuneClient("http://127.0.0.1:8000", token=os.environ.get("SPECTUNE_TOKEN")) as c:
        job = c.submit(preset="tiny-cpu", idempotency_key="nightly-2026-11-29")
        job = c.wait(job.id)
        print(c.export(job.id, "vllm-json"))

Light: it imports httpx, pydantic and ``tuner.states`` (standard library only), never
fastapi, optuna, sqlalchemy or the engines, so a pipeline can use it without SpecTune's
server dependencies. Tolerant: answers are read into small models of their own that ignore
fields they do not know, so a newer server does not break an older client. An error answer
(RFC 9457 problem+json) raises ``ApiError`` with its status, ``detail`` and, on a 422,
``errors`` naming each field. ``wait`` rides out restarts and rate limits with backoff;
``submit`` with an idempotency key retries the same.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from tuner.states import JOB_ENDED

__all__ = [
    "ApiError",
    "ExportFormat",
    "ExportFormatList",
    "Job",
    "JobList",
    "Pareto",
    "ParetoPoint",
    "Preset",
    "RoundCostTrial",
    "RoundCostVerdict",
    "SpecTuneClient",
    "Trial",
    "TrialDetail",
    "TrialPage",
    "wait_until_up",
]

# Answers worth another try: the server restarting, overloaded, or rate-limiting this client.
RETRY_STATUS = frozenset({429, 502, 503, 504})
T = TypeVar("T")


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Job(_Tolerant):
    id: int
    name: str = ""
    state: str
    n_trials: int = 0
    trials_done: int = 0
    trials_failed: int = 0
    current_trial: dict[str, Any] | None = None
    eta_s: float | None = None
    cancel_requested: bool = False
    error: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    engine_launches: int = 0
    workload: str = ""
    concurrency: list[int] = Field(default_factory=list)
    slo: dict[str, float] = Field(default_factory=dict)


class JobList(_Tolerant):
    items: list[Job]
    total: int
    offset: int = 0
    limit: int = 0


class Trial(_Tolerant):
    number: int
    state: str
    method: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    fail_reason: str | None = None
    fail_detail: str | None = None
    concurrency: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    measurements: list[dict[str, Any]] = Field(default_factory=list)


class TrialPage(_Tolerant):
    items: list[Trial]
    total: int
    offset: int = 0
    limit: int = 0


class TrialDetail(Trial):
    log_tail: str | None = None


class ParetoPoint(_Tolerant):
    trial_number: int
    method: str
    params: dict[str, Any] = Field(default_factory=dict)
    concurrency: int
    output_tok_per_s: float | None = None
    p99_tpot_ms: float | None = None
    feasible: bool = False
    on_front: bool = False
    is_baseline: bool = False
    is_winner: bool = False
    speedup: float | None = None
    verdict: str | None = None
    confirmed: bool = False
    noisy: bool = False
    launches: int = 1
    interval_kind: str | None = None


class RoundCostVerdict(_Tolerant):
    concurrency: int
    spec_ms_per_token: float
    baseline_ms_per_token: float
    state: str
    speedup: float | None = None


class RoundCostTrial(_Tolerant):
    trial_number: int
    method: str
    params: dict[str, Any] = Field(default_factory=dict)
    verdicts: list[RoundCostVerdict] = Field(default_factory=list)
    crossover_concurrency: int | None = None


class Pareto(_Tolerant):
    job_id: int
    workload: str = ""
    concurrency: int
    levels: list[int] = Field(default_factory=list)
    slo: dict[str, float] = Field(default_factory=dict)
    points: list[ParetoPoint] = Field(default_factory=list)
    baseline_trial: int | None = None
    winner_trial: int | None = None
    winner_confirmed: bool = False
    equivalent_to_winner: list[dict[str, Any]] = Field(default_factory=list)
    round_cost: list[RoundCostTrial] = Field(default_factory=list)
    why: list[str] = Field(default_factory=list)
    references: list[dict[str, Any]] = Field(default_factory=list)


class ExportFormat(_Tolerant):
    name: str
    label: str = ""
    engine: str = ""
    description: str = ""


class ExportFormatList(_Tolerant):
    formats: list[ExportFormat]


class Preset(_Tolerant):
    name: str
    file: str = ""
    yaml: str = ""
    trials: int | None = None
    methods: list[str] = Field(default_factory=list)
    error: str | None = None


def wait_until_up(url: str, *, timeout_s: float = 60.0, alive: Any = None) -> bool:
    """Poll ``url`` (a health route) until it answers 2xx; False on timeout. ``alive``: a
    callable; when it turns false (the server process exited) waiting stops at once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return False
        try:
            if httpx.get(url, timeout=2.0).is_success:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


class ApiError(RuntimeError):
    """A 4xx/5xx: ``detail`` (a sentence), ``errors`` (422: ``[{loc, msg, type}]``), and
    the whole problem document; ``retry_after_s`` when the server said when to come back."""

    def __init__(
        self,
        status: int,
        detail: str,
        errors: list[dict[str, Any]] | None = None,
        problem: dict[str, Any] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.errors = errors or []
        self.problem = problem or {}
        self.retry_after_s = retry_after_s


def _error(r: httpx.Response) -> ApiError:
    try:
        body = r.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    detail = body.get("detail")
    errors = body.get("errors")
    if isinstance(detail, list):  # an older server: FastAPI's own 422 list
        errors, detail = detail, None
    retry = r.headers.get("retry-after", "")
    return ApiError(
        r.status_code,
        str(detail if detail is not None else (r.text or r.reason_phrase)),
        errors if isinstance(errors, list) else None,
        body,
        float(retry) if retry.isdigit() else None,
    )


def _transient(e: Exception) -> bool:
    if isinstance(e, ApiError):
        return e.status in RETRY_STATUS
    return isinstance(e, httpx.TransportError)


class SpecTuneClient:
    """``http`` may be any ``httpx.Client`` (tests pass FastAPI's TestClient).

    ``retries``: transient failures (connection errors, 429, 502-504) ridden out in a row by
    ``wait`` and by an idempotent ``submit``, sleeping ``backoff_s`` x 2^n (up to
    ``max_backoff_s``, or the server's Retry-After) with jitter."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        http: httpx.Client | None = None,
        retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._own = http is None
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self._sleep = sleep

    def __enter__(self) -> SpecTuneClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._http.close()

    def _call(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, **kw: Any
    ) -> Any:
        r = self._http.request(method, path, headers={**self._headers, **(headers or {})}, **kw)
        if r.status_code >= 400:
            raise _error(r)
        return r.json()

    def _retrying(self, fn: Callable[[], T]) -> T:
        """``fn()``, tried again after each transient failure, ``retries`` times in a row."""
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except (ApiError, httpx.TransportError) as e:
                if attempt >= self.retries or not _transient(e):
                    raise
                pause = min(self.max_backoff_s, self.backoff_s * 2**attempt)
                if isinstance(e, ApiError) and e.retry_after_s is not None:
                    pause = max(pause, min(e.retry_after_s, self.max_backoff_s))
                self._sleep(pause * random.uniform(1.0, 1.25))
        raise AssertionError("unreachable")

    def submit(
        self,
        *,
        preset: str | None = None,
        search_space: dict[str, Any] | None = None,
        search_space_yaml: str | None = None,
        trials: int | None = None,
        slo: dict[str, float] | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """Queue a job. With ``idempotency_key`` (sent as the Idempotency-Key header) a retry
        can never make a second job, so transient failures are retried."""
        body = {
            k: v
            for k, v in {
                "preset": preset,
                "search_space": search_space,
                "search_space_yaml": search_space_yaml,
                "trials": trials,
                "slo": slo,
            }.items()
            if v is not None
        }
        if idempotency_key is None:
            return Job.model_validate(self._call("POST", "/api/jobs", json=body))
        headers = {"Idempotency-Key": idempotency_key}
        return Job.model_validate(
            self._retrying(lambda: self._call("POST", "/api/jobs", json=body, headers=headers))
        )

    def job(self, job_id: int) -> Job:
        return Job.model_validate(self._call("GET", f"/api/jobs/{job_id}"))

    def jobs(self, *, offset: int = 0, limit: int = 100) -> JobList:
        params = {"offset": offset, "limit": limit}
        return JobList.model_validate(self._call("GET", "/api/jobs", params=params))

    def cancel(self, job_id: int) -> Job:
        return Job.model_validate(self._call("POST", f"/api/jobs/{job_id}/cancel"))

    def wait(self, job_id: int, *, poll_s: float = 5.0, timeout_s: float = 24 * 3600) -> Job:
        """Poll until the job has ended; TimeoutError past ``timeout_s``. A server restart or
        a 429 in between is waited out with backoff (``retries`` in a row at most)."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self._retrying(lambda: self.job(job_id))
            if job.state in JOB_ENDED:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job.state} after {timeout_s} s")
            self._sleep(poll_s)

    def trials(self, job_id: int, *, offset: int = 0, limit: int = 100) -> TrialPage:
        params = {"offset": offset, "limit": limit}
        return TrialPage.model_validate(
            self._call("GET", f"/api/jobs/{job_id}/trials", params=params)
        )

    def trial(self, job_id: int, number: int) -> TrialDetail:
        return TrialDetail.model_validate(self._call("GET", f"/api/jobs/{job_id}/trials/{number}"))

    @staticmethod
    def _slice(slo: dict[str, float] | None, concurrency: int | None) -> dict[str, Any]:
        params: dict[str, Any] = {f"slo_{k}": v for k, v in (slo or {}).items()}
        if concurrency is not None:
            params["concurrency"] = concurrency
        return params

    def pareto(
        self, job_id: int, *, slo: dict[str, float] | None = None, concurrency: int | None = None
    ) -> Pareto:
        """``slo`` like ``{"p99_tpot_ms": 20}``: re-evaluated on the server, nothing re-run."""
        params = self._slice(slo, concurrency)
        return Pareto.model_validate(
            self._call("GET", f"/api/jobs/{job_id}/pareto", params=params)
        )

    def export(
        self,
        job_id: int,
        fmt: str = "vllm-json",
        *,
        slo: dict[str, float] | None = None,
        concurrency: int | None = None,
    ) -> str:
        params = {"format": fmt, **self._slice(slo, concurrency)}
        return self._call("GET", f"/api/jobs/{job_id}/export", params=params)["text"]

    def export_formats(self) -> ExportFormatList:
        """Every format ``export`` takes, with its label and engine."""
        return ExportFormatList.model_validate(self._call("GET", "/api/export-formats"))

    def presets(self) -> list[Preset]:
        return [Preset.model_validate(p) for p in self._call("GET", "/api/search-spaces")]
