"""The soak's clients (bench/soak.py): a submitter and pollers against the REST API, every
answer counted. A refused connection (the API restarting) is counted apart from a 5xx: the
first is a fault the soak caused, the second a failure of the service."""

from __future__ import annotations

import argparse
import random
import threading
import time
import uuid
from collections import Counter
from typing import Any

import httpx

from tests.helpers import TINY_REPLAY_SPACE, TINY_SURFACE
from tuner.states import JOB_ENDED

__all__ = ["Clients"]


class Clients:
    """Mixed into ``Soak``: what its client threads share."""

    args: argparse.Namespace
    base: str
    lock: threading.Lock
    jobs: set[int]
    count: Counter[str]
    errors: list[str]
    soaking: threading.Event
    done: threading.Event

    def _call(self, client: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
        """One request, counted; a connection refused (the API restarting) is not a 5xx."""
        try:
            r = client.request(method, self.base + path, **kw)
        except httpx.TransportError:
            with self.lock:
                self.count["api_unreachable"] += 1
            raise
        with self.lock:
            self.count["api_requests"] += 1
            if r.status_code >= 500:
                self.count["api_5xx"] += 1
                self.errors.append(f"{method} {path}: {r.status_code} {r.text[:300]}")
        return r

    def _submit_once(self, client: httpx.Client, body: dict, key: str) -> int:
        """Resend with the same key until a 200/201 answer: the job's id."""
        while not self.done.is_set():
            try:
                r = self._call(
                    client, "POST", "/api/jobs", json=body, headers={"Idempotency-Key": key}
                )
            except httpx.TransportError:
                time.sleep(1)
                continue
            if r.status_code in (200, 201):
                return int(r.json()["id"])
            if r.status_code < 500:
                raise RuntimeError(f"POST /api/jobs refused: {r.status_code} {r.text[:500]}")
            time.sleep(1)
        raise RuntimeError("soak ended before the submission was answered")

    def _unfinished(self, client: httpx.Client) -> int:
        try:
            r = self._call(client, "GET", "/api/jobs", params={"limit": 500})
        except httpx.TransportError:
            return 1 << 30
        if r.status_code != 200:
            return 1 << 30
        return sum(j["state"] not in JOB_ENDED for j in r.json()["items"])

    def submitter(self) -> None:
        rng = random.Random(self.args.seed + 1)
        with httpx.Client(timeout=60) as client:
            i = 0
            while self.soaking.is_set():
                time.sleep(rng.uniform(1, 4))
                if self._unfinished(client) >= self.args.backlog:
                    continue
                i += 1
                text = TINY_REPLAY_SPACE.format(
                    name=f"soak-{i}",
                    surface=TINY_SURFACE,
                    model="../models/tiny/target",
                    trials=rng.randint(6, 20),
                ).replace("seed: 0", f"seed: {rng.randint(0, 2**31)}")
                body, key = {"search_space_yaml": text}, f"soak-{uuid.uuid4()}"
                job_id = self._submit_once(client, body, key)
                with self.lock:
                    self.jobs.add(job_id)
                    self.count["jobs_submitted"] += 1
                if i % 5 == 0 and self._submit_once(client, body, key) != job_id:
                    with self.lock:
                        self.count["idempotency_breaks"] += 1
                if i % 8 == 0:
                    threading.Timer(rng.uniform(0.2, 2), self._cancel, (job_id,)).start()
                if i % 10 == 0:
                    self._try_forbidden_watch(client, job_id)

    def _cancel(self, job_id: int) -> None:
        with httpx.Client(timeout=60) as client:
            try:
                r = self._call(client, "POST", f"/api/jobs/{job_id}/cancel")
                with self.lock:
                    self.count["cancels"] += r.status_code < 400
            except httpx.TransportError:
                pass

    def _try_forbidden_watch(self, client: httpx.Client, job_id: int) -> None:
        """A watch on an internal address outside the allow-list must be a 422 naming url."""
        body = {"url": "http://10.1.2.3:8000", "job_id": job_id}
        try:
            r = self._call(client, "POST", "/api/watches", json=body)
        except httpx.TransportError:
            return
        refused = r.status_code == 422 and "url" in r.text
        with self.lock:
            self.count["ssrf_refused" if refused else "ssrf_accepted"] += 1
            if not refused:
                self.errors.append(f"watch on 10.1.2.3: {r.status_code} {r.text[:300]}")

    def poller(self, seed: int) -> None:
        rng = random.Random(seed)
        paths = ["", "/trials", "/pareto", "/log", "/predictions"]
        with httpx.Client(timeout=60) as client:
            while not self.done.is_set():
                time.sleep(rng.uniform(0.05, 0.4))
                with self.lock:
                    ids = sorted(self.jobs)
                try:
                    if not ids or rng.random() < 0.2:
                        self._call(
                            client, "GET", rng.choice(["/metrics", "/api/jobs", "/healthz"])
                        )
                    else:
                        job = rng.choice(ids)
                        self._call(client, "GET", f"/api/jobs/{job}{rng.choice(paths)}")
                except httpx.TransportError:
                    time.sleep(0.5)
