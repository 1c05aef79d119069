"""``/metrics``: jobs by state, trials, launches and worker heartbeat ages counted in the
database, and request latencies by route template (Prometheus text format)."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import make_settings
from tuner.api import create_app
from tuner.storage import JobModel, Store, utcnow


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_metrics_count_jobs_trials_launches_and_heartbeats(tmp_path):
    s = make_settings(tmp_path)
    with TestClient(create_app(s, run_worker=False)) as c:
        for _ in range(3):
            assert c.post("/api/jobs", json={"preset": "fake-small"}).status_code == 201
        assert c.post("/api/jobs/3/cancel").status_code == 200
        with Store(s.database_url).session() as sess:
            job = sess.get(JobModel, 2)
            job.state, job.claimed_by = "running", "worker-a"
            job.heartbeat_at = utcnow() - timedelta(seconds=42)
            job.engine_launches, job.confirm_launches = 5, 2
        for _ in range(4):
            assert c.get("/api/jobs/1").status_code == 200
        assert c.get("/api/jobs/99").status_code == 404
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = _samples(r.text)
    assert m[("spectune_jobs", (("state", "queued"),))] == 1
    assert m[("spectune_jobs", (("state", "running"),))] == 1
    assert m[("spectune_jobs", (("state", "cancelled"),))] == 1
    assert m[("spectune_jobs", (("state", "succeeded"),))] == 0
    assert m[("spectune_trials", (("state", "complete"),))] == 0
    assert m[("spectune_engine_launches_total", (("kind", "search"),))] == 5
    assert m[("spectune_engine_launches_total", (("kind", "confirm"),))] == 2
    age = m[("spectune_worker_heartbeat_age_seconds", (("worker", "worker-a"),))]
    assert 41 <= age < 120
    # latencies by route template: one series for every job id, never one per id
    key = (("method", "GET"), ("route", "/api/jobs/{job_id}"), ("status", "200"))
    assert m[("spectune_http_request_duration_seconds_count", key)] == 4
    key404 = (("method", "GET"), ("route", "/api/jobs/{job_id}"), ("status", "404"))
    assert m[("spectune_http_request_duration_seconds_count", key404)] == 1
    assert not [k for k in m if "/api/jobs/1" in str(k) or "/api/jobs/99" in str(k)]


def test_metrics_need_a_token_when_auth_is_on(tmp_path):
    s = make_settings(tmp_path)
    with TestClient(create_app(s, run_worker=False)) as c:
        _, token = Store(s.database_url).create_token("prom")
        assert c.get("/metrics").status_code == 401
        r = c.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and "spectune_jobs" in r.text


def test_two_apps_in_one_process_keep_their_own_numbers(tmp_path):
    a = make_settings(tmp_path / "a")
    b = make_settings(tmp_path / "b")
    with (
        TestClient(create_app(a, run_worker=False)) as ca,
        TestClient(create_app(b, run_worker=False)) as cb,
    ):
        ca.post("/api/jobs", json={"preset": "fake-small"})
        ma, mb = _samples(ca.get("/metrics").text), _samples(cb.get("/metrics").text)
    assert ma[("spectune_jobs", (("state", "queued"),))] == 1
    assert mb[("spectune_jobs", (("state", "queued"),))] == 0
    post = (("method", "POST"), ("route", "/api/jobs"), ("status", "201"))
    assert ("spectune_http_request_duration_seconds_count", post) not in mb


def _lost() -> Exception:
    from sqlalchemy.exc import OperationalError

    from tuner.storage import StorageError

    wrapped = StorageError("database error: server closed the connection")
    wrapped.__cause__ = OperationalError("SELECT", {}, Exception("server closed the connection"))
    return wrapped


def test_a_scrape_while_the_database_restarts_says_so_instead_of_a_503(tmp_path, monkeypatch):
    """Found by bench/soak.py: GET /metrics answered 503 while PostgreSQL restarted (the
    counts are read at scrape time). Now the scrape answers, with spectune_database_up 0 and
    no counts, as an exporter reports its backend; any other error still fails it."""
    s = make_settings(tmp_path)
    with TestClient(create_app(s, run_worker=False), raise_server_exceptions=False) as c:
        c.post("/api/jobs", json={"preset": "fake-small"})
        m = _samples(c.get("/metrics").text)
        assert m[("spectune_database_up", ())] == 1
        assert m[("spectune_jobs", (("state", "queued"),))] == 1

        def lost(self: Store) -> None:
            raise _lost()

        monkeypatch.setattr(Store, "service_counts", lost)
        monkeypatch.setattr(Store, "watches", lost)
        r = c.get("/metrics")
        assert r.status_code == 200
        m = _samples(r.text)
        assert m[("spectune_database_up", ())] == 0
        assert not [k for k in m if k[0] in ("spectune_jobs", "spectune_watch_up")]

        def broken(self: Store) -> None:
            raise ValueError("a bug, not a restart")

        monkeypatch.setattr(Store, "service_counts", broken)
        assert c.get("/metrics").status_code >= 500
