"""A small typed client for pipelines: submit a job, wait for it, read the front, export.

    from tuner.client import SpecTuneClient
    with SpecTuneClient("http://127.0.0.1:8000", token=os.environ.get("SPECTUNE_TOKEN")) as c:
        job = c.submit(preset="tiny-cpu", idempotency_key="nightly-2026-11-29")
        job = c.wait(job.id)
        print(c.export(job.id, "vllm-json"))

Answers are parsed into the server's own models (``tuner.api.schemas``); a 4xx/5xx raises
``ApiError`` with the status and the server's ``detail`` (field paths on 422).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from tuner.api.schemas import (
    ExportFormat,
    ExportFormatList,
    JobList,
    JobPublic,
    ParetoPublic,
    SearchSpacePreset,
    TrialDetail,
    TrialPage,
)

__all__ = ["ApiError", "SpecTuneClient", "wait_until_up"]

_ENDED = ("succeeded", "failed", "cancelled")


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
    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class SpecTuneClient:
    """``http`` may be any ``httpx.Client`` (tests pass FastAPI's TestClient)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._own = http is None
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout_s)
        self._headers = headers

    def __enter__(self) -> SpecTuneClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._http.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        r = self._http.request(method, path, headers=self._headers, **kw)
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text
            raise ApiError(r.status_code, detail)
        return r.json()

    def submit(
        self,
        *,
        preset: str | None = None,
        search_space: dict[str, Any] | None = None,
        search_space_yaml: str | None = None,
        trials: int | None = None,
        slo: dict[str, float] | None = None,
        idempotency_key: str | None = None,
    ) -> JobPublic:
        body = {
            k: v
            for k, v in {
                "preset": preset,
                "search_space": search_space,
                "search_space_yaml": search_space_yaml,
                "trials": trials,
                "slo": slo,
                "idempotency_key": idempotency_key,
            }.items()
            if v is not None
        }
        return JobPublic.model_validate(self._call("POST", "/api/jobs", json=body))

    def job(self, job_id: int) -> JobPublic:
        return JobPublic.model_validate(self._call("GET", f"/api/jobs/{job_id}"))

    def jobs(self, *, offset: int = 0, limit: int = 100) -> JobList:
        params = {"offset": offset, "limit": limit}
        return JobList.model_validate(self._call("GET", "/api/jobs", params=params))

    def cancel(self, job_id: int) -> JobPublic:
        return JobPublic.model_validate(self._call("POST", f"/api/jobs/{job_id}/cancel"))

    def wait(self, job_id: int, *, poll_s: float = 5.0, timeout_s: float = 24 * 3600) -> JobPublic:
        """Poll until the job has ended; TimeoutError past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job.state in _ENDED:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job.state} after {timeout_s} s")
            time.sleep(poll_s)

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
    ) -> ParetoPublic:
        """``slo`` like ``{"p99_tpot_ms": 20}``: re-evaluated on the server, nothing re-run."""
        params = self._slice(slo, concurrency)
        return ParetoPublic.model_validate(
            self._call("GET", f"/api/jobs/{job_id}/pareto", params=params)
        )

    def export(
        self,
        job_id: int,
        fmt: ExportFormat = "vllm-json",
        *,
        slo: dict[str, float] | None = None,
        concurrency: int | None = None,
    ) -> str:
        params = {"format": fmt, **self._slice(slo, concurrency)}
        return self._call("GET", f"/api/jobs/{job_id}/export", params=params)["text"]

    def export_formats(self) -> ExportFormatList:
        """Every format ``export`` takes, with its label and engine."""
        return ExportFormatList.model_validate(self._call("GET", "/api/export-formats"))

    def presets(self) -> list[SearchSpacePreset]:
        return [
            SearchSpacePreset.model_validate(p) for p in self._call("GET", "/api/search-spaces")
        ]
