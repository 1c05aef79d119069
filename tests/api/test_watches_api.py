"""``/api/watches`` (register, list, show, delete), the poller that fills in each watch's
latest window, and the watch gauges on SpecTune's /metrics. The watched server is the FAKE
vLLM /metrics server and the job the FAKE chain-surface job: nothing here is measured."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.api.test_predictions import guided_replay_job
from tests.fake_vllm_metrics import Snap, fake_vllm, snap_after
from tests.helpers import make_settings
from tuner.api import create_app
from tuner.storage import Store
from tuner.watch._result import CANNOT_TELL

START = Snap(drafts=500, draft_tokens=2000, accepted=900, per_pos=[350, 250, 180, 120])


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("watches")
    settings = make_settings(root, watch_tick_s=0.1)
    jid = guided_replay_job(root, settings.database_url)
    with TestClient(create_app(settings, run_worker=False)) as c:
        yield c, jid, root


def _gauges(client: TestClient) -> dict[str, dict[str, float]]:
    """spectune_watch_* samples by name, then by watch id."""
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(client.get("/metrics").text):
        for s in fam.samples:
            if s.name.startswith("spectune_watch_"):
                out.setdefault(s.name, {})[s.labels["watch"]] = s.value
    return out


def test_crud_and_field_errors(service):
    client, jid, _ = service
    r = client.post("/api/watches", json={"url": "http://127.0.0.1:9/", "job_id": jid})
    assert r.status_code == 201, r.text
    w = r.json()
    assert (w["url"], w["job_id"], w["interval_s"], w["verdict"]) == (
        "http://127.0.0.1:9",
        jid,
        60.0,
        None,
    )
    assert client.get(f"/api/watches/{w['id']}").json()["id"] == w["id"]
    assert w["id"] in [x["id"] for x in client.get("/api/watches").json()["watches"]]
    assert client.get("/api/watches", params={"job_id": jid + 1}).json() == {"watches": []}
    assert client.delete(f"/api/watches/{w['id']}").status_code == 204
    assert client.get(f"/api/watches/{w['id']}").status_code == 404
    assert client.delete(f"/api/watches/{w['id']}").status_code == 404

    bad = client.post("/api/watches", json={"url": "localhost:8000", "job_id": jid})
    assert bad.status_code == 422 and "url" in str(bad.json())
    missing = client.post("/api/watches", json={"url": "http://127.0.0.1:1", "job_id": 999})
    assert missing.status_code == 422
    assert any(e["loc"][-1] == "job_id" for e in missing.json()["errors"])
    body = {"url": "http://127.0.0.1:1", "job_id": jid, "interval_s": 1}
    short = client.post("/api/watches", json=body)
    assert short.status_code == 422 and "interval_s" in str(short.json())


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5:8000",  # the cluster's internal network
        "http://169.254.169.254",  # a cloud metadata service
        "http://vllm.internal:8000",  # a name: not loopback, not configured
        "https://[fd00::1]:443",
    ],
)
def test_a_watch_on_a_host_not_allowed_is_refused(service, url):
    """Server-side request forgery: the service would scrape the URL from its own network."""
    client, jid, _ = service
    r = client.post("/api/watches", json={"url": url, "job_id": jid})
    assert r.status_code == 422, r.text
    (err,) = r.json()["errors"]
    assert err["loc"][-1] == "url" and err["type"] == "not_allowed"
    assert "SPECTUNE_WATCH_HOSTS" in err["msg"]


@pytest.mark.parametrize(
    "url", ["http://localhost:8000", "http://[::1]:8000", "http://127.0.0.2:1"]
)
def test_loopback_may_always_be_watched(service, url):
    client, jid, _ = service
    r = client.post("/api/watches", json={"url": url, "job_id": jid})
    assert r.status_code == 201, r.text
    assert client.delete(f"/api/watches/{r.json()['id']}").status_code == 204


def test_configured_hosts_may_be_watched(tmp_path):
    settings = make_settings(tmp_path, watch_hosts="vllm.internal:8000,Metrics.Example")
    assert settings.watch_url_allowed("http://vllm.internal:8000")
    assert not settings.watch_url_allowed("http://vllm.internal:8001")
    assert settings.watch_url_allowed("https://metrics.example:9443")
    assert not settings.watch_url_allowed("http://10.0.0.5:8000")
    with pytest.raises(ValueError, match="host or host:port"):
        make_settings(tmp_path, watch_hosts="http://vllm.internal:8000")


def test_a_stored_watch_no_longer_allowed_is_not_scraped(tmp_path):
    """A watch registered before the allow-list (or before it shrank) is kept, not scraped,
    and says why."""
    settings = make_settings(tmp_path, watch_tick_s=0.1)
    jid = guided_replay_job(tmp_path, settings.database_url)
    wid = Store(settings.database_url).create_watch(jid, "http://10.0.0.5:8000", 5.0).id
    with TestClient(create_app(settings, run_worker=False)) as client:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            w = client.get(f"/api/watches/{wid}").json()
            if w["error"]:
                break
            time.sleep(0.1)
    assert w["verdict"] == CANNOT_TELL and "SPECTUNE_WATCH_HOSTS" in w["error"]


def test_the_poller_stores_the_verdict_and_the_gauges_show_it(service):
    client, jid, root = service
    end = snap_after(START, 400, [0.3, 0.1, 0.05, 0.0])
    with fake_vllm([START, end], root=str(root / "target")) as (url, _):
        w = client.post("/api/watches", json={"url": url, "job_id": jid, "interval_s": 5}).json()
        down = client.post(
            "/api/watches", json={"url": "http://127.0.0.1:9", "job_id": jid, "interval_s": 5}
        ).json()
        deadline = time.monotonic() + 30
        while (got := client.get(f"/api/watches/{w['id']}").json())["verdict"] is None:
            assert time.monotonic() < deadline, got
            time.sleep(0.2)
    assert got["verdict"] == "switch to k=1" and got["error"] is None
    last = got["last"]
    assert last["num_drafts"] == 400 and last["window_s"] >= 5
    assert last["per_position_acceptance"] == pytest.approx([0.3, 0.1, 0.05, 0.0])
    unreachable = client.get(f"/api/watches/{down['id']}").json()
    assert unreachable["verdict"] == "cannot tell yet" and "/metrics" in unreachable["error"]

    g = _gauges(client)
    wid, did = str(w["id"]), str(down["id"])
    assert g["spectune_watch_verdict"][wid] == 2  # switch depth
    assert g["spectune_watch_recommended_depth"][wid] == 1
    assert g["spectune_watch_acceptance_rate"][wid] == pytest.approx(last["acceptance_rate"])
    assert g["spectune_watch_predicted_speedup"][wid] == pytest.approx(last["predicted_speedup"])
    assert g["spectune_watch_up"] == {wid: 1.0, did: 0.0}
    assert g["spectune_watch_verdict"][did] == 0
    assert did not in g.get("spectune_watch_acceptance_rate", {})

    # the jobs page shows it beside the job: the page reads /api/watches
    assert "watched server" in client.get("/jobs.js").text
    client.delete(f"/api/watches/{w['id']}")
    client.delete(f"/api/watches/{down['id']}")
    assert wid not in _gauges(client).get("spectune_watch_verdict", {})
