"""The jobs page shows each watched server's latest verdict beside its job (Debian chromium
via Playwright; WCAG 2.1 A/AA by axe-core). The job is the FAKE chain-surface job and the
watched server the FAKE vLLM /metrics server; the verdict is written into the store as the
poller would, so nothing here is measured."""

from __future__ import annotations

import pytest

from tests.api.test_predictions import guided_replay_job
from tests.api.test_ui import browser_page, serve
from tests.api.test_ui_views import axe_violations
from tests.fake_vllm_metrics import Snap, fake_vllm
from tuner.storage import Store

pytestmark = pytest.mark.browser


def test_the_jobs_page_shows_the_watch_verdict_beside_the_job(tmp_path):
    url = f"sqlite:///{tmp_path / 'spectune.db'}"  # the database serve() gives the app
    job = guided_replay_job(tmp_path, url)
    snap = Snap(drafts=10, draft_tokens=40, accepted=20, per_pos=[8, 6, 4, 2])
    # a day-long window: the poller's first scrape works and no window closes in this test
    with fake_vllm([snap]) as (server, _), serve(tmp_path) as base:
        store = Store(url)
        w = store.create_watch(job, server, 86_400)
        reason = "k=1 predicted 9% better than k=4"
        store.record_watch(w.id, verdict="switch to k=1", result={"reason": reason}, error=None)
        with browser_page(base) as pg:
            pg.goto(base + "/#/")
            cell = pg.locator(f"tr[data-job='{job}'] [data-testid=watch-verdict]")
            cell.get_by_text("switch to k=1").wait_for()
            assert server in cell.inner_text()
            assert cell.locator("div").get_attribute("title") == reason
            others = pg.locator("[data-testid=watch-verdict]").all_inner_texts()
            assert len(others) == 1  # one job, one watch
            assert axe_violations(pg) == []
            assert pg.console_errors == []
