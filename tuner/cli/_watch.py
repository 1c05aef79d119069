"""``spectune watch``: is the deployed configuration still paying on today's traffic?

Every window scrapes the server's counters (``tuner.watch``) and prints the live acceptance
(measured) beside job N's predictions at it (predicted, labelled so) and the verdict.
``--once`` prints one window and exits; without it a window follows the last until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from tuner.cli._common import EXIT_FAIL, EXIT_INPUT, EXIT_OK, err
from tuner.metrics import LoadError
from tuner.storage import JobNotFound, SpaceRefused, Store, database_url
from tuner.watch import (
    MIN_DRAFTS,
    Scraper,
    WatchedJob,
    WatchResult,
    check_url,
    load_job_model,
    next_window,
)

__all__ = ["add_watch_parser", "render_watch"]


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def render_watch(r: WatchResult) -> str:
    """The window as text: measured first, then job N's predictions, then the verdict."""
    pp = " ".join(f"{x:.3f}" for x in r.per_position_acceptance) or "-"
    lines = [
        f"{r.url}  window {r.window_s:.0f} s  (measured from the server's counters)",
        f"  drafts {r.num_drafts if r.num_drafts is not None else '-'}"
        f"  acceptance {_f(r.acceptance_rate)}  per position {pp}"
        f"  mean acceptance length {_f(r.mean_acceptance_length, '.2f')}",
        f"  live concurrency {_f(r.live_concurrency, '.2f')} running,"
        f" {_f(r.live_waiting, '.2f')} waiting; server depth k={r.server_depth}",
    ]
    if r.job_acceptance is not None:
        ja = r.job_acceptance
        lines.append(
            f"  job {r.job_id} measured (trial {ja.trial}, concurrency {ja.concurrency}): "
            f"per position {' '.join(f'{x:.3f}' for x in ja.per_position_acceptance)}"
            f"  mean acceptance length {ja.mean_acceptance_length:.2f}"
        )
    lines.append(
        f"Predicted by job {r.job_id}'s model at concurrency {r.model_concurrency} (not measured):"
    )
    lines.append(f"  {'k':>2}  {'tok/s [band]':<26} {'mean TPOT ms [band]':<26} speedup")
    for p in r.predictions:
        tok = f"{_f(p.output_tok_per_s, '.1f')} [{_f(p.output_tok_per_s_low, '.1f')}-"
        tok += f"{_f(p.output_tok_per_s_high, '.1f')}]"
        tpot = f"{_f(p.mean_tpot_ms, '.2f')} [{_f(p.mean_tpot_ms_low, '.2f')}-"
        tpot += f"{_f(p.mean_tpot_ms_high, '.2f')}]"
        lines.append(f"  {p.depth:>2}  {tok:<26} {tpot:<26} {_f(p.speedup_vs_no_spec, '.2f')}x")
        lines += [f"      {n}" for n in p.notes if "outside" in n or "never" in n]
    lines += [f"  note: {n}" for n in r.notes]
    lines += [f"  differs from job {r.job_id}'s winner: {d}" for d in r.config_differences]
    lines.append(f"  not compared (the server does not expose it): {'; '.join(r.not_compared)}")
    lines.append(f"Verdict: {r.verdict} ({r.reason})")
    return "\n".join(lines)


async def _loop(args: argparse.Namespace, model: WatchedJob, url: str) -> None:
    s = Scraper(url)
    while True:
        r = await next_window(s, model, args.interval, args.sample)
        print(json.dumps(r.model_dump()) if args.json else render_watch(r), flush=True)
        if args.once:
            return


def _watch(args: argparse.Namespace) -> int:
    try:
        url = check_url(args.url)
    except ValueError as e:
        err(str(e))
        return EXIT_INPUT
    if args.interval <= 0:
        err("--interval: must be positive seconds")
        return EXIT_INPUT
    store = Store(database_url(args.db))
    store.ensure_schema()
    try:
        model = load_job_model(store, args.job)
    except JobNotFound as e:
        err(f"--job: {e}")
        return EXIT_INPUT
    except (ValueError, SpaceRefused) as e:
        err(f"--job: {e}")
        return EXIT_INPUT
    try:
        asyncio.run(_loop(args, model, url))
    except LoadError as e:
        err(f"--url: {url}: {e}")
        return EXIT_FAIL
    return EXIT_OK


def add_watch_parser(sub: Any, db_help: str) -> None:
    """Register ``spectune watch`` on the CLI's subparsers."""
    p = sub.add_parser(
        "watch",
        help="does a running vLLM server's configuration still pay? (live acceptance "
        "against the job's predictions)",
        description=f"Scrape the server's /metrics every --sample s over --interval s; fewer "
        f"than {MIN_DRAFTS} drafts in a window is 'cannot tell yet'.",
    )
    p.add_argument("--url", required=True, help="the vLLM server, http://HOST:PORT")
    p.add_argument("--job", required=True, type=int, help="the job that chose its configuration")
    p.add_argument("--interval", type=float, default=60.0, help="window seconds (default 60)")
    p.add_argument("--sample", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--once", action="store_true", help="one window, then exit")
    p.add_argument("--json", action="store_true", help="one JSON object per window on stdout")
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=_watch)
