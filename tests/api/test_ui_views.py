"""The job page's views in a real browser (Debian chromium via Playwright): the history and
importance plots, trial comparison, the CSV download, keyboard sorting, the one live region,
Pareto axes that follow the job's objectives, and WCAG 2.1 A/AA checked by axe-core.

axe-core is a local file (``make test`` installs it from the npm registry under
.venv/ui/node_modules); it is injected into the page, never fetched from a CDN. The engine is
the FAKE OpenAI server: no number here measures anything real.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pytest

from tests.api.test_ui import browser_page, live, page  # noqa: F401  (fixtures)
from tests.helpers import FAKE_PRESET, REPO

pytestmark = pytest.mark.browser

AXE = REPO / ".venv" / "ui" / "node_modules" / "axe-core" / "axe.min.js"
WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


def axe_violations(pg) -> list[str]:
    """axe-core's WCAG 2.1 A/AA violations on the page as it is now, one line per node."""
    if not AXE.is_file():
        pytest.fail(f"axe-core is not installed at {AXE} (make test installs it: $(UI_STAMP))")
    if not pg.evaluate("typeof window.axe !== 'undefined'"):
        pg.add_script_tag(path=str(AXE))
    res = pg.evaluate("tags => axe.run(document, {runOnly: {type: 'tag', values: tags}})", WCAG)
    return [
        f"{v['id']}: {n['target']} {n.get('failureSummary', '')}"
        for v in res["violations"]
        for n in v["nodes"]
    ]


def submit(pg, body: dict) -> int:
    job = pg.evaluate(
        """b => fetch('/api/jobs', {method: 'POST', headers: {'Content-Type': 'application/json'},
        body: JSON.stringify(b)}).then(r => r.json())""",
        body,
    )
    assert "id" in job, job
    return job["id"]


def get(pg, path: str):
    return pg.evaluate("p => fetch(p).then(r => r.json())", path)


def wait_done(pg, job: int) -> None:
    pg.goto(pg.base + f"/#/jobs/{job}")
    pg.wait_for_selector("[data-testid=job-state]:has-text('succeeded')", timeout=120_000)


def test_history_importance_compare_csv_keyboard_and_axe(page, tmp_path):  # noqa: F811
    page.goto(page.base + "/")
    page.wait_for_selector("#preset option[value=fake-small]", state="attached")
    assert axe_violations(page) == []  # the jobs page, with its form
    job = submit(page, {"preset": "fake-small", "trials": 4})
    wait_done(page, job)
    trials = get(page, f"/api/jobs/{job}/trials?limit=1000")["items"]
    rep = get(page, f"/api/jobs/{job}/pareto")
    info = get(page, f"/api/jobs/{job}")
    page.wait_for_selector("[data-testid=history-point]")
    page.wait_for_function(
        "n => document.querySelectorAll('[data-testid=pareto-point]').length === n",
        arg=len(rep["points"]),
    )

    # One live region, polite, saying the job's state; the page itself is not one.
    assert page.locator("[aria-live]").count() == 1
    assert page.get_attribute("#app", "aria-live") is None
    # The search may stop before its cap (nothing left could win): the count is the job's.
    assert 2 <= info["trials_done"] <= 4 and info["n_trials"] == 4
    done = f"Job #{job} succeeded: {info['trials_done']} of 4 trials done"
    assert done in page.inner_text("#status")

    # History: a dot per measured trial at its value of the first objective, and the best
    # feasible value so far (feasibility: the chart's points at the objectives' level).
    metric = info["objectives"][0]["metric"]
    assert metric == "output_tok_per_s"
    measured = sorted((t for t in trials if t["state"] == "complete"), key=lambda t: t["number"])
    dots = page.locator("[data-testid=history-point]")
    got = {
        int(d["trial"]): float(d["value"])
        for d in dots.evaluate_all("ds => ds.map(d => d.dataset)")
    }
    assert got == {t["number"]: t["metrics"][metric] for t in measured}
    feasible = {
        p["trial_number"]: p["feasible"]
        for p in rep["points"]
        if p["concurrency"] == info["objective_concurrency"]
    }
    best, steps = None, []
    for t in measured:
        v = t["metrics"][metric]
        if feasible.get(t["number"]) is True and (best is None or v > best):
            best = v
        if best is not None:
            steps.append(best)
    line = page.get_attribute("[data-testid=best-so-far]", "data-values")
    assert [float(v) for v in line.split(",")] == steps and len(steps) >= 2

    # Importance: 4 configurations are too few; the page says exactly what the API says.
    page.wait_for_selector("[data-testid=importance-sentence]")
    imp = get(page, f"/api/jobs/{job}/importance")
    assert imp["supported"] == [] and "at least 10 are needed" in imp["sentence"]
    assert page.inner_text("[data-testid=importance-sentence]") == imp["sentence"]
    assert page.locator("[data-testid=importance] svg").count() == 0  # no bars without evidence
    assert axe_violations(page) == []  # the job page

    # Sorting from the keyboard: a button in each header; aria-sort on the sorted column.
    sort = page.locator("[data-testid=trials-table] th button.sort[data-col='tok/s']")
    sort.focus()
    page.keyboard.press("Enter")
    th = page.locator("[data-testid=trials-table] th:has(button[data-col='tok/s'])")
    assert th.get_attribute("aria-sort") == "ascending"
    page.keyboard.press("Enter")  # the focus stays on the header's button
    assert th.get_attribute("aria-sort") == "descending"
    assert page.locator("[data-testid=trials-table] th[aria-sort]").count() == 1
    vals = [
        float(v)
        for v in page.locator(
            "[data-testid=trials-table] tbody tr td:nth-child(4)"
        ).all_inner_texts()
        if v != "–"
    ]
    assert vals == sorted(vals, reverse=True) and len(vals) >= 2

    # CSV: every trial, its parameters and measured metrics, as the API answers them.
    with page.expect_download() as dl:
        page.click("#csv")
    text = Path(dl.value.path()).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["trial"]) for r in rows] == sorted(t["number"] for t in trials)
    assert dl.value.suggested_filename == f"spectune-job-{job}-trials.csv"
    for r, t in zip(rows, sorted(trials, key=lambda t: t["number"]), strict=True):
        assert r["state"] == t["state"] and r["method"] == t["method"]
        assert r["param.max_num_seqs"] == str(t["params"]["max_num_seqs"])
        for k in ("output_tok_per_s", "p99_tpot_ms"):
            assert float(r[k]) == t["metrics"][k]
            st = t["metrics"]["stats"][k]
            assert float(r[f"{k}_ci95_high"]) == st["ci95_high"]

    # Compare two trials: parameters and each level's metrics with their 95% intervals.
    a, b = measured[0]["number"], measured[-1]["number"]
    page.check(f"input.pick[data-trial='{a}']")
    assert page.is_disabled("#compare")
    page.check(f"input.pick[data-trial='{b}']")
    page.click("#compare")
    page.wait_for_url(f"**/#/jobs/{job}/compare/{a},{b}")
    table = page.locator("[data-testid=compare-table]")
    table.wait_for()
    heads = table.locator("thead th").evaluate_all("hs => hs.map(h => +h.dataset.trial)")
    assert heads == [a, b]
    conc = info["objective_concurrency"]
    row = table.locator(f"tr[data-metric=output_tok_per_s][data-concurrency='{conc}'] td")
    for cell, t in zip(row.all_inner_texts(), (measured[0], measured[-1]), strict=True):
        m = t["metrics"]
        st = m["stats"]["output_tok_per_s"]
        want = f"{m['output_tok_per_s']:.1f} [{max(0, st['ci95_low']):.1f}–{st['ci95_high']:.1f}]"
        assert cell == want
    assert table.locator("tr[data-param=method]").count() == 1
    assert axe_violations(page) == []  # the comparison page

    # The trial page.
    page.goto(page.base + f"/#/jobs/{job}/trials/{b}")
    page.wait_for_selector("h3:has-text('Latency distribution')")
    assert axe_violations(page) == []
    assert page.console_errors == [], page.console_errors


def test_pareto_axes_follow_the_objectives(page):  # noqa: F811
    page.goto(page.base + "/")
    objectives = "objectives: [{metric: requests_per_s}, {metric: p99_ttft_ms}]\n"
    job = submit(page, {"search_space_yaml": FAKE_PRESET + objectives, "trials": 3})
    wait_done(page, job)
    rep = get(page, f"/api/jobs/{job}/pareto")
    trials = {t["number"]: t for t in get(page, f"/api/jobs/{job}/trials")["items"]}
    page.wait_for_function(
        "n => document.querySelectorAll('[data-testid=pareto-point]').length === n",
        arg=len(rep["points"]),
    )
    assert page.get_attribute("[data-testid=x-axis]", "data-metric") == "p99_ttft_ms"
    assert page.get_attribute("[data-testid=y-axis]", "data-metric") == "requests_per_s"
    assert "p99 TTFT (ms) — lower is better" in page.text_content("[data-testid=x-axis]")
    assert "requests/s — higher is better" in page.text_content("[data-testid=y-axis]")
    # Each point sits at its measured values (requests/s from the trial's own measurement).
    for p in rep["points"]:
        pt = page.locator(
            f"[data-testid=pareto-point][data-trial='{p['trial_number']}']"
            f"[data-concurrency='{p['concurrency']}']"
        )
        m = next(
            m
            for m in trials[p["trial_number"]]["measurements"]
            if m["concurrency"] == p["concurrency"] and m["workload"] == rep["workload"]
        )
        assert float(pt.get_attribute("data-x")) == p["p99_ttft_ms"]
        assert float(pt.get_attribute("data-y")) == m["requests_per_s"]
    # Every kind of marker has a legend entry: the faded ones are the other concurrency level.
    assert page.locator("[data-testid=pareto-point].other").count() > 0
    other = page.locator("[data-testid=other-level-legend]")
    assert other.is_visible() and "other concurrency levels" in other.inner_text()
    faded = page.locator("[data-testid=other-level-legend] .key.other")
    assert float(faded.evaluate("k => getComputedStyle(k).opacity")) < 1
    # This job confirms nothing (confirm_top 0): its winner is marked unconfirmed, in words
    # beside the chart and with a "?" the legend explains.
    assert not rep["winner_confirmed"] and rep["winner_trial"] is not None
    mark = page.locator("[data-testid=unconfirmed-mark]")
    assert mark.count() == 1 and mark.get_attribute("data-trial") == str(rep["winner_trial"])
    assert "Winner unconfirmed" in page.text_content("[data-testid=winner-status]")
    legend = page.locator("[data-testid=unconfirmed-legend]")
    assert legend.is_visible() and "winner unconfirmed" in legend.inner_text()
    # The job's SLO is on TPOT, not on this x axis: no SLO line until a TTFT limit is typed.
    assert page.get_attribute("[data-testid=slo-line]", "visibility") == "hidden"
    page.fill("#slo-ttft", "500")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=slo-line]')"
        ".getAttribute('visibility') === 'visible'"
    )
    assert "SLO p99 TTFT 500 ms" in page.text_content("[data-testid=slo-line]")
    # The history follows the first objective; both objectives can be picked.
    assert page.locator("#history-objective option").all_inner_texts() == [
        "requests/s",
        "p99 TTFT (ms)",
    ]
    page.select_option("#history-objective", "p99_ttft_ms")
    dots = page.locator("[data-testid=history-point]").evaluate_all(
        "ds => ds.map(d => [+d.dataset.trial, +d.dataset.value])"
    )
    assert dots and all(trials[n]["metrics"]["p99_ttft_ms"] == v for n, v in dots)
    # A point is a link to its trial, from the keyboard too.
    first = page.locator("[data-testid=pareto-point].sel").first
    n = first.get_attribute("data-trial")
    first.focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/#/jobs/{job}/trials/{n}")
    assert page.console_errors == [], page.console_errors


def test_running_trial_log_is_live_and_scrubbed(tmp_path):
    from tests.api.test_ui import serve
    from tests.helpers import FAKE_LAUNCHER

    slow = FAKE_PRESET.replace("num_prompts: 4, max_tokens: 12", "num_prompts: 12, max_tokens: 32")
    secret = "sk-live0123456789abcdefghij"
    with (
        serve(tmp_path, slow, [*FAKE_LAUNCHER, "--fake-token-ms", "25"]) as base,
        browser_page(base) as pg,
    ):
        pg.goto(base + "/")
        job = submit(pg, {"preset": "fake-small", "trials": 4})
        pg.goto(base + f"/#/jobs/{job}")
        log = pg.locator("[data-testid=live-log]")
        pg.wait_for_selector("[data-testid=live-log]:has-text('fake engine on')", timeout=60_000)
        # The API names the running trial's log in the job's own folder; a secret written
        # there reaches the page redacted.
        deadline = time.monotonic() + 60
        while (r := get(pg, f"/api/jobs/{job}/log"))["file"] is None:
            assert time.monotonic() < deadline, r
            time.sleep(0.2)
        assert r["running"] and r["job_state"] == "running"
        folder = next((tmp_path / "work" / "logs").iterdir())
        path = folder / r["file"]
        with path.open("a") as f:
            f.write(
                f"\nAuthorization: Bearer {secret}\nOPENAI_API_KEY {secret}\n--api-key {secret}\n"
            )
        pg.wait_for_selector("[data-testid=live-log]:has-text('Authorization: Bearer [REDACTED]')")
        assert secret not in log.inner_text()
        assert secret not in str(get(pg, f"/api/jobs/{job}/log"))
        assert "secrets redacted" in pg.inner_text("[data-testid=log-meta]")
        assert axe_violations(pg) == []  # the job page while it runs, with its live log
        pg.click("#cancel")
        pg.wait_for_selector("[data-testid=job-state]:has-text('cancelled')", timeout=60_000)
        pg.wait_for_selector("[data-testid=log-panel]", state="hidden")
        assert get(pg, f"/api/jobs/{job}/log")["running"] is False


def test_log_files_outside_the_jobs_folder_are_never_read(tmp_path):
    from tuner.api.services.logs import _confined, _newest

    folder = (tmp_path / "logs" / "db-abc123-job-1").resolve()
    folder.mkdir(parents=True)
    outside = tmp_path / "secret.txt"
    outside.write_text("not a log")
    (folder / "trial-3.log").symlink_to(outside)
    assert _confined(folder, "trial-3.log") is None
    assert _confined(folder, "../../secret.txt") is None
    assert _newest(folder) is None
    (folder / "trial-4.log").write_text("engine says hi\n")
    assert _confined(folder, "trial-4.log") == folder / "trial-4.log"
    assert _newest(folder) == folder / "trial-4.log"
