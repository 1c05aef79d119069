"""A guided job's page in a real browser (Debian chromium via Playwright): the depth model's
predictions drawn apart from the measurements (hollow, dashed, labelled predicted), the
trials table's "proposed by" and "predicted" columns, the SIMULATED banner, and WCAG 2.1
A/AA checked by axe-core. The job replays the FAKE chain-model surface: nothing here was
measured."""

from __future__ import annotations

import pytest

from tests.api.test_predictions import guided_replay_job
from tests.api.test_ui import browser_page, serve
from tests.api.test_ui_views import axe_violations, get

pytestmark = pytest.mark.browser


def test_predicted_points_are_hollow_labelled_and_apart_from_the_measured(tmp_path):
    jid = guided_replay_job(tmp_path, f"sqlite:///{tmp_path / 'spectune.db'}", simulated=True)
    with serve(tmp_path) as base, browser_page(base) as pg:
        pg.goto(base + f"/#/jobs/{jid}")
        pg.wait_for_selector("[data-testid=job-state]:has-text('succeeded')")
        preds = get(pg, f"/api/jobs/{jid}/predictions")
        rep = get(pg, f"/api/jobs/{jid}/pareto")
        assert preds["kind"] == "predicted" and preds["points"]
        n = sum(q["workload"] == rep["workload"] for q in preds["points"])
        pg.wait_for_function(
            "n => document.querySelectorAll('[data-testid=predicted-point]').length === n", arg=n
        )
        # Measured points are as they were: one per (configuration, concurrency).
        assert pg.locator("[data-testid=pareto-point]").count() == len(rep["points"])
        marker = pg.locator("[data-testid=predicted-point]").first
        style = marker.evaluate(
            "e => { const s = getComputedStyle(e); return [s.fill, s.strokeDasharray]; }"
        )
        assert style[0] == "none" and style[1] not in ("none", ""), style
        assert marker.get_attribute("aria-label").startswith("predicted")
        assert marker.locator("title").text_content().startswith("predicted")
        # a predicted marker is never a link to a trial
        assert marker.get_attribute("data-trial") is None
        assert marker.get_attribute("role") == "img"
        legend = pg.locator("[data-testid=predicted-legend]")
        assert legend.is_visible() and "predicted (not measured)" in legend.inner_text()
        marker.dispatch_event("mouseenter")
        assert pg.locator(".tip").inner_text().startswith("predicted (not measured)")

        banner = pg.locator("[data-testid=simulated-banner]")
        assert banner.is_visible()
        assert banner.inner_text() == "SIMULATED: no number on this page was measured"

        heads = pg.locator("[data-testid=trials-table] thead th").all_inner_texts()
        assert any(h.startswith("proposed by") for h in heads), heads
        assert any(h.startswith("predicted") for h in heads), heads
        by = pg.locator("[data-testid=proposed-by]").all_inner_texts()
        assert "start" in by and "guide: depth" in by, by
        cells = pg.locator("[data-testid=predicted-cell]").all_inner_texts()
        shown = [c for c in cells if c != "-"]
        assert shown and all("±" in c and "(err " in c for c in shown), cells
        trials = get(pg, f"/api/jobs/{jid}/trials?limit=1000")["items"]
        assert len(shown) == sum(t["prediction_error_pct"] is not None for t in trials)
        classed = next(t for t in trials if (t["search"] or {}).get("class"))
        cell = pg.locator(
            f"[data-testid=trials-table] tr[data-trial='{classed['number']}'] "
            "[data-testid=proposed-by]"
        )
        assert classed["search"]["class"]["why"][0] in cell.get_attribute("title")

        assert axe_violations(pg) == []
        assert pg.console_errors == [], pg.console_errors
