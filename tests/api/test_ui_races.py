"""Races of the job page against a slow or moving server, made deterministic by a patched
fetch that holds answers back.

- The export panel asks for the winner of the chart it was drawn for, never for the SLO the
  input holds by the time the answer arrives (CI stop 18 failed on that race: a drag of the
  SLO line sent the old winner's export with the new, infeasible SLO and got a 409).
- A slow server never gets overlapping refreshes of a running job's page.

The job ran against the FAKE OpenAI server: its numbers measure nothing."""

from __future__ import annotations

import pytest

from tests.api.test_ui import browser_page, run_fake_job_in_thread, serve
from tests.api.test_ui_views import get
from tests.helpers import every_method_space as _space
from tuner.job import create_job
from tuner.storage import Store

pytestmark = pytest.mark.browser

# Pareto answers wait on window.__release() while window.__hold is set.
HOLD_PARETO = """() => {
  const real = window.fetch.bind(window);
  window.__pending = 0;
  window.__hold = false;
  window.fetch = async (url, opts) => {
    const r = await real(url, opts);
    if (window.__hold && String(url).includes('/pareto')) {
      window.__pending += 1;
      await new Promise((ok) => { window.__release = ok; });
    }
    return r;
  };
}"""


def test_exports_follow_the_answer_not_the_input(tmp_path):
    with serve(tmp_path) as base:
        job_id = run_fake_job_in_thread(tmp_path, _space(trials=4))
        with browser_page(base) as pg:
            statuses: list[tuple[str, int]] = []
            pg.on(
                "response",
                lambda r: "/export?" in r.url and statuses.append((r.url, r.status)),
            )
            pg.goto(base + f"/#/jobs/{job_id}")
            pg.wait_for_selector("[data-testid=job-state]:has-text('succeeded')")
            summary = pg.locator("[data-testid=pareto-summary]")
            pg.wait_for_selector("[data-testid=pareto-summary]:has-text('winner: trial')")
            rep = get(pg, f"/api/jobs/{job_id}/pareto")
            tpots = [
                p["p99_tpot_ms"] for p in rep["points"] if p["concurrency"] == rep["concurrency"]
            ]
            tight = f"{min(tpots) / 10:.6f}"  # nothing is feasible under it
            loose = f"{max(tpots) * 10:.4f}"  # every point is
            pg.fill("#slo-tpot", tight)
            pg.wait_for_selector("[data-testid=pareto-summary]:has-text('nothing is feasible')")
            pg.wait_for_selector("pre.export[data-format=vllm-json]:has-text('nothing feasible')")

            # The loose SLO's answer is held while the input already reads the tight one (its
            # own reload not yet due): the winner appears, and its exports must be the loose
            # SLO's.
            statuses.clear()
            pg.evaluate(HOLD_PARETO)
            pg.evaluate("() => { window.__hold = true; }")
            pg.fill("#slo-tpot", loose)
            pg.wait_for_function("() => window.__pending === 1")
            pg.evaluate(
                "v => { document.querySelector('#slo-tpot').value = v; window.__hold = false;"
                " window.__release(); }",
                tight,
            )
            pg.wait_for_selector("[data-testid=pareto-summary]:has-text('winner: trial')")
            pg.wait_for_selector("button.copy[data-format=vllm-json]:not([disabled])")
            assert statuses and all(s == 200 for _, s in statuses), statuses
            assert all(f"slo_p99_tpot_ms={loose}" in u for u, _ in statuses), statuses

            # The tight SLO's own reload then empties the panel, with no request at all.
            n = len(statuses)
            pg.dispatch_event("#slo-tpot", "input")
            pg.wait_for_selector("pre.export[data-format=vllm-json]:has-text('nothing feasible')")
            assert "nothing is feasible" in summary.inner_text()
            assert len(statuses) == n
            assert pg.console_errors == [], pg.console_errors


# Answers of GET /api/jobs/{id} (the page's refresh) take 3 s; the most in flight at once
# is counted.
SLOW_REFRESH = """() => {
  const real = window.fetch.bind(window);
  window.__inflight = 0; window.__most = 0; window.__refreshes = 0;
  window.fetch = async (url, opts) => {
    if (!/\\/api\\/jobs\\/\\d+(\\?|$)/.test(String(url))) return real(url, opts);
    window.__refreshes += 1;
    window.__inflight += 1;
    window.__most = Math.max(window.__most, window.__inflight);
    try {
      await new Promise((ok) => setTimeout(ok, 3000));
      return await real(url, opts);
    } finally { window.__inflight -= 1; }
  };
}"""


def test_a_slow_server_gets_one_refresh_at_a_time(tmp_path):
    """A job no worker takes (made in the database, not through the API) stays queued: its
    page keeps refreshing every 2 s, each answer here taking 3 s."""
    with serve(tmp_path) as base:
        store = Store(f"sqlite:///{tmp_path / 'spectune.db'}")
        job_id = create_job(store, _space(trials=2))
        with browser_page(base) as pg:
            pg.goto(base + f"/#/jobs/{job_id}")
            pg.wait_for_selector("[data-testid=job-state]")
            pg.evaluate(SLOW_REFRESH)
            pg.wait_for_function("() => window.__refreshes >= 3", timeout=30_000)
            assert pg.evaluate("() => window.__most") == 1
            assert pg.console_errors == [], pg.console_errors
