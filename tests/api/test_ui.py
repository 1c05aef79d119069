"""The web UI in a real browser (Debian chromium via Playwright) against a live server.

The server is the real app under uvicorn on a free loopback port, with its embedded worker;
only the engine is the FAKE OpenAI server (a test-only constructor argument), so the job runs
in seconds. The chart's numbers here measure nothing real.

The docs' screenshots come from docs/screenshots.py (a real-engine job's database), not from here.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from tests.helpers import (
    FAKE_LAUNCHER,
    FAKE_PRESET_CONFIRM,
    FAKE_SERVER,
    REPO,
    fake_measurers,
    make_preset_dir,
    make_settings,
    run_fake_job,
)
from tests.helpers import every_method_space as _space
from tuner.api import create_app
from tuner.space import loads_space

CHROMIUM = "/usr/bin/chromium"

pytestmark = pytest.mark.browser

pw = pytest.importorskip("playwright.sync_api", reason="pip install '.[ui]' (make test does)")
if not Path(CHROMIUM).exists():
    pytest.skip(
        "Debian chromium is not installed (make test installs it)", allow_module_level=True
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(tmp_path: Path, preset: str = FAKE_PRESET_CONFIRM, launcher: list[str] = FAKE_LAUNCHER):
    """The real app under uvicorn on a free port, its worker launching ``launcher``."""
    make_preset_dir(tmp_path, preset)
    settings = make_settings(tmp_path, port=_free_port())
    app = create_app(settings, measurers=fake_measurers(launcher))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=settings.port, log_level="warning")
    )
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        server.should_exit = True
        t.join(timeout=30)


@pytest.fixture
def live(tmp_path):
    with serve(tmp_path) as base:  # confirms the best configuration at the end
        yield base


@contextlib.contextmanager
def browser_page(base: str):
    """A chromium page on ``base`` that records console errors in ``page.console_errors``."""
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        ctx = browser.new_context(viewport={"width": 1200, "height": 900}, accept_downloads=True)
        ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
        pg = ctx.new_page()
        pg.set_default_timeout(20_000)
        pg.console_errors = []  # type: ignore[attr-defined]
        pg.on("console", lambda m: m.type == "error" and pg.console_errors.append(m.text))
        pg.on("pageerror", lambda e: pg.console_errors.append(f"page error: {e}"))
        pg.base = base  # type: ignore[attr-defined]
        try:
            yield pg
        finally:
            browser.close()


@pytest.fixture
def page(live):
    with browser_page(live) as pg:
        yield pg


def run_fake_job_in_thread(tmp_path: Path, space) -> int:
    """A job of ``space`` run to its end against the FAKE server, in the live server's
    database; in its own thread, since Playwright's sync API holds this one's event loop."""
    done: list[int] = []
    errors: list[BaseException] = []

    def job() -> None:
        try:
            db_url = f"sqlite:///{tmp_path / 'spectune.db'}"
            launcher = [sys.executable, str(FAKE_SERVER)]
            done.append(run_fake_job(db_url, space, tmp_path / "w", launcher))
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=job)
    t.start()
    t.join(timeout=300)
    assert not t.is_alive() and not errors and done, errors
    return done[0]


def _feasible_count(page) -> int:
    return page.locator(".pt.sel[data-feasible=true]").count()


def test_submit_watch_move_slo_and_copy_the_winner(page, tmp_path):
    base = page.base
    page.goto(base + "/")
    page.wait_for_selector("#preset option[value=fake-small]", state="attached")

    # Inline validation names the bad field (the 422 it answers is expected in the console).
    page.check("input[name=src][value=yaml]")
    yaml_box = page.locator("#yaml")
    assert "fake-engine-test" in yaml_box.input_value()  # prefilled from the preset
    yaml_box.fill(yaml_box.input_value() + "bogus_field: 1\n")
    page.wait_for_selector("[data-testid=form-errors] li:has-text('bogus_field')")
    expected_422 = [e for e in page.console_errors if "422" in e]
    page.console_errors[:] = [e for e in page.console_errors if "422" not in e]
    assert expected_422, "the inline validation should have asked the server"

    page.check("input[name=src][value=preset]")
    page.fill("#trials", "4")
    page.click("#submit")
    page.wait_for_url("**/#/jobs/1")
    page.wait_for_selector("[data-testid=job-state]:has-text('succeeded')", timeout=90_000)
    assert "4 / 4 trials" in page.inner_text("[data-testid=progress-text]")

    # The chart has a point per (configuration, concurrency); all feasible at the preset's SLO.
    rep = page.evaluate("fetch('/api/jobs/1/pareto').then(r => r.json())")
    n_all = len(rep["points"])
    n_sel = sum(p["concurrency"] == rep["concurrency"] for p in rep["points"])
    assert n_all >= 4 and n_sel >= 2
    page.wait_for_function(
        "n => document.querySelectorAll('[data-testid=pareto-point]').length === n", arg=n_all
    )
    assert page.locator(".pt.sel").count() == n_sel
    assert page.locator(".pt.sel.other").count() == 0
    assert _feasible_count(page) == n_sel
    assert page.locator("rect[data-testid=pareto-point]").count() >= 1  # the baseline
    assert page.locator(".winner-ring").count() == 1
    # Why the winner won, from the API's sentences.
    # (The page may still show the answer it had before the job ended: wait for the last one.)
    page.wait_for_function(
        """w => JSON.stringify([...document.querySelectorAll('[data-testid=why-winner] li')]
        .map(l => l.textContent)) === JSON.stringify(w)""",
        arg=rep["why"],
    )
    why = page.locator("[data-testid=why-winner] li").all_inner_texts()
    assert why == rep["why"] and why
    assert any("Time per committed token" in t or "baseline won" in t for t in why)

    # 95% interval whiskers (2 repeats per point): one per axis and point, where visible.
    whiskers = page.locator("[data-testid=ci-whisker]")
    assert whiskers.count() >= n_all
    assert page.locator("[data-testid=ci-whisker][data-axis=y]").count() >= 1
    assert page.locator("[data-testid=ci-whisker][data-axis=x]").count() >= 1
    # Confirmed points (the best configuration and the baseline, at every level) are marked.
    n_conf = sum(p["confirmed"] for p in rep["points"])
    assert n_conf >= 2 * len(rep["levels"])
    assert page.locator("[data-testid=confirmed-mark]").count() == n_conf
    # A confirmed winner: no "?" mark, and the words say how many launches measured it.
    assert rep["winner_confirmed"] and page.locator("[data-testid=unconfirmed-mark]").count() == 0
    assert "Winner confirmed" in page.text_content("[data-testid=winner-status]")
    base = rep["baseline_trial"]
    assert page.locator(f"[data-testid=confirmed-mark][data-trial='{base}']").count() == 2

    # The round-cost verdict: a row per speculative trial, a cell per concurrency level.
    spec_trials = sorted({p["trial_number"] for p in rep["points"] if not p["is_baseline"]})
    rows = page.locator("[data-testid=verdict-table] tbody tr")
    assert [int(n) for n in rows.evaluate_all("rs => rs.map(r => r.dataset.trial)")] == (
        spec_trials
    )
    for text in page.locator(
        "[data-testid=verdict-table] tbody td[data-concurrency]"
    ).all_inner_texts():
        assert re.fullmatch(
            r"\d+\.\d\d ms/tok, ((pays off|does not pay) by \d+\.\d%"
            r"|tied within noise \([+-]\d+\.\d%\))",
            text,
        ), text
    assert len(
        page.locator("[data-testid=verdict-table] tbody td[data-concurrency]").all_inner_texts()
    ) == len(spec_trials) * len(rep["levels"])
    for r, rc in zip(rows.all(), rep["round_cost"], strict=True):
        cross = r.locator("td.crossover").inner_text()
        pays = [v["pays_off"] for v in rc["verdicts"]]
        if not any(pays):
            assert cross == "never pays"
        elif rc["crossover_concurrency"] is None:
            assert cross == (
                "pays at every level measured"
                if all(pays)
                else "pays at the highest level measured"
            )
        else:
            assert cross == f"stops paying at concurrency {rc['crossover_concurrency']}"
    assert "baseline" in page.inner_text("[data-testid=verdict-table] thead")

    # The trials table shows greedy match, KV tokens and peak RSS.
    heads = page.locator("[data-testid=trials-table] thead th").all_inner_texts()
    for col in ("greedy match", "KV tokens", "peak RSS MB"):
        assert any(h.startswith(col) for h in heads), heads
    i_match = next(i for i, h in enumerate(heads) if h.startswith("greedy match")) + 1
    matches = page.locator(
        f"[data-testid=trials-table] tbody tr td:nth-child({i_match})"
    ).all_inner_texts()
    assert sorted(matches) == ["100.0%"] * (len(matches) - 1) + ["reference"]
    n_confirmed = len({p["trial_number"] for p in rep["points"] if p["confirmed"]})
    assert n_confirmed >= 2  # the baseline and the winner, and finalists the budget allowed
    assert (
        page.locator("[data-testid=trials-table] .badge:has-text('confirmed')").count()
        == n_confirmed
    )

    # Typing an SLO between the fastest and slowest point splits them.
    tpots = sorted(p["p99_tpot_ms"] for p in rep["points"] if p["concurrency"] == 2)
    mid = (tpots[0] + tpots[-1]) / 2
    page.fill("#slo-tpot", f"{mid:.4f}")
    page.wait_for_function(
        "n => document.querySelectorAll('.pt.sel[data-feasible=true]').length < n", arg=n_sel
    )
    assert 0 < _feasible_count(page) < n_sel

    # Dragging the SLO line to the far left makes everything infeasible, and back again.
    hit = page.locator(".slo-hit").bounding_box()
    plot = page.locator("[data-testid=pareto-chart]").bounding_box()
    y = hit["y"] + hit["height"] / 2
    page.mouse.move(hit["x"] + hit["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(plot["x"] + 60, y, steps=8)
    page.mouse.up()
    page.wait_for_function("() => !document.querySelector('.pt.sel[data-feasible=true]')")
    assert "nothing is feasible" in page.inner_text("[data-testid=pareto-summary]")
    assert float(page.input_value("#slo-tpot")) < tpots[0]
    page.wait_for_selector("pre.export[data-format=vllm-json]:has-text('nothing feasible')")
    hit = page.locator(".slo-hit").bounding_box()
    page.mouse.move(hit["x"] + hit["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(plot["x"] + plot["width"] - 30, y, steps=8)
    page.mouse.up()
    page.wait_for_function(
        "n => document.querySelectorAll('.pt.sel[data-feasible=true]').length === n", arg=n_sel
    )

    # Hovering a point shows its configuration.
    page.locator("[data-testid=pareto-point]").last.hover()  # drawn last: nothing covers it
    tip = page.inner_text(".tip")
    assert "trial" in tip and "tok/s" in tip and "95% interval" in tip
    assert "median of 2 repeats" in tip and "peak RSS" in tip

    # Copy the winning --speculative-config: valid JSON, the same as the API's export.
    button = page.locator("button.copy[data-format=vllm-json]")
    button.wait_for()
    page.wait_for_function(
        "() => !document.querySelector('button.copy[data-format=vllm-json]').disabled"
    )
    button.click()
    page.wait_for_selector("button.copy[data-format=vllm-json]:has-text('Copied')")
    copied = page.evaluate("navigator.clipboard.readText()")
    want = page.evaluate(
        "fetch('/api/jobs/1/export?format=vllm-json').then(r => r.json()).then(j => j.text)"
    )
    assert copied == want
    spec = json.loads(copied)
    assert spec is None or spec["method"] in ("ngram", "draft_model")
    sglang = page.inner_text("pre.export[data-format=sglang]")
    trt = page.inner_text("pre.export[data-format=trtllm-yaml]")
    if spec is None:
        assert "--speculative-algorithm" not in sglang and "speculative_config" not in trt
    else:
        assert "--speculative-algorithm" in sglang and "decoding_type" in trt

    # The trials table sorts by a column.
    page.click("[data-testid=trials-table] th:has-text('tok/s')")
    vals = [
        float(v)
        for v in page.locator(
            "[data-testid=trials-table] tbody tr td:nth-child(4)"
        ).all_inner_texts()
        if v != "–"
    ]
    assert vals == sorted(vals) and len(vals) >= 2

    # Screenshot of the job page with an SLO that splits the points.
    page.fill("#slo-tpot", f"{mid:.4f}")
    page.wait_for_function(
        "n => document.querySelectorAll('.pt.sel[data-feasible=true]').length < n", arg=n_sel
    )
    shot = tmp_path / "job-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # The trial page: per-position acceptance and latency distributions.
    spec_trial = next(p["trial_number"] for p in rep["points"] if p["method"] != "none")
    page.click(f"[data-testid=trials-table] a[href='#/jobs/1/trials/{spec_trial}']")
    page.wait_for_selector("h3:has-text('Per-position acceptance')")
    assert page.locator("text=draft position 1").count() >= 1
    assert page.locator("h3:has-text('Latency distribution')").count() == 2  # two levels
    # Real histograms of the per-request TTFT, TPOT and end-to-end times, at each level.
    hists = page.locator("[data-testid=histogram]")
    assert hists.count() == 3 * 2
    assert sorted(set(hists.evaluate_all("hs => hs.map(h => h.dataset.metric)"))) == [
        "TPOT",
        "TTFT",
        "end-to-end",
    ]
    for i in range(hists.count()):
        h = hists.nth(i)
        counts = [
            int(c)
            for c in h.locator("[data-testid=hist-bar]").evaluate_all(
                "bs => bs.map(b => b.dataset.count)"
            )
        ]
        assert counts and all(c > 0 for c in counts)
        assert f"· {sum(counts)} requests" in (h.text_content() or "")  # every request is in a bar
        assert h.locator("[data-testid=hist-marker]").count() == 3  # p50, p90, p99
    assert "greedy output match with the baseline 100.0%" in page.inner_text(
        "[data-testid=trial-memory]"
    )

    assert page.console_errors == [], page.console_errors


def test_unknown_job_page_and_token_prompt(page):
    page.goto(page.base + "/#/jobs/42")
    page.wait_for_selector("text=Job 42 not found.")
    errors = [e for e in page.console_errors if "404" not in e]
    assert errors == []


def test_job_page_lists_another_target_and_hosted_rows(page, tmp_path):
    """A job that served an MTP checkpoint (another target) and had a hosted endpoint: the
    page says both under the chart, and labels the heads in its points."""
    data = _space(trials=5).model_dump(mode="json")
    data["hosted"] = [
        {
            "name": "provider",
            "base_url": "http://127.0.0.1:9",
            "model": "m",
            "api_key_env": "SPECTUNE_UI_TEST_UNSET_KEY",
        }
    ]
    space = loads_space(json.dumps(data), base_dir=REPO)
    job_id = run_fake_job_in_thread(tmp_path, space)
    page.goto(page.base + f"/#/jobs/{job_id}")
    also = page.locator("[data-testid=also-measured]")
    try:
        also.locator("li:has-text('target-mtp')").wait_for(timeout=60_000)
    except pw.TimeoutError:
        pytest.fail(
            f"no other-target line; console: {page.console_errors}; page: "
            f"{page.locator('main').inner_text()[:2000]}"
        )
    text = also.inner_text()
    assert "compared only with its own baseline" in text
    assert "Hosted endpoint provider" in text and "SPECTUNE_UI_TEST_UNSET_KEY is not set" in text
    assert page.locator("[data-testid=why-winner] li").count() >= 1
    # A 409 is an export the winner has no form for (TensorRT-LLM has no EAGLE-1; one depth
    # best everywhere: no schedule): the page shows the reason; the browser logs the status.
    errors = [e for e in page.console_errors if "409" not in e]
    assert errors == [], errors
