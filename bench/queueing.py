"""Batch size that queues: a real job with max_num_seqs [2, 4] at concurrency [1, 4], and what
each batch class measured at concurrency 4.

    flock /tmp/engine.lock .venv/bin/python bench/queueing.py --db sqlite:////tmp/queue.db \
        [--space search_spaces/tiny-cpu.yaml] [--trials 8] [--slo-p99-ttft-ms 1500] \
        [--work-dir DIR] [--job N]

The job takes the engine and models of ``--space`` (the tiny CPU pair by default), n-gram
only (k 1..4, lookup 1..4: one proposer), ``max_num_seqs: [2, 4]``, ``concurrency: [1, 4]``,
the objective at concurrency 4 and an SLO on p99 TTFT only (1500 ms: above a batch of 4's
p99 TTFT, 0.9 s measured on 2 cores, and near a batch of 2's, 1.4-2.1 s, where the queue
decides; at 500 ms nothing was feasible); confirmation off (the classes are the point). The
guided search prices n-gram at max_num_seqs 4 (a running batch of 4 at concurrency 4:
nothing queues), then launches the baseline and the incumbent at 2 (a running batch of 2:
half the requests queue), so each class has its own baseline. ``--job N`` only
summarises job N of ``--db`` (nothing runs).

Prints one progress line per trial on stderr, then per class at concurrency 4: the baseline
and the class's best speculative configuration (by the first objective) with p99 and mean
TTFT, mean queue wait, p99 and mean TPOT, output tok/s, the verdict against the class's own
baseline; then whether TTFT is higher at max_num_seqs 2 as queueing says. Last line: one JSON
object with the same numbers. This benchmark is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.job import create_job, run_job  # noqa: E402
from tuner.pareto import Report, job_report  # noqa: E402
from tuner.space import SearchSpace, load_space, parse_space  # noqa: E402
from tuner.storage import Store  # noqa: E402

LEVEL = 4
_SHOWN = (
    "p99_ttft_ms",
    "mean_ttft_ms",
    "mean_queue_ms",
    "p99_tpot_ms",
    "mean_tpot_ms",
    "output_tok_per_s",
)


def build_space(preset: SearchSpace, trials: int, slo_ttft_ms: float) -> SearchSpace:
    """``preset``'s engine, models, workload and protocol with the queueing axes."""
    data = preset.model_dump(mode="json", exclude={"base_dir"})
    data.update(
        name=f"{preset.name}-queueing",
        methods={
            "ngram": {
                "num_speculative_tokens": {"min": 1, "max": 4},
                "prompt_lookup_min": {"min": 1, "max": 1},
                "prompt_lookup_max": {"min": 4, "max": 4},
            }
        },
        max_num_seqs=[2, 4],
        concurrency=[1, LEVEL],
        objective_concurrency=LEVEL,
        slo={"p99_ttft_ms": slo_ttft_ms},
        start_with=[],
        warm_start=0,
        hosted=[],
        trials=trials,
        search="guided",
    )
    data["measurement"] = {**data["measurement"], "confirm_top": 0}
    return parse_space(data, base_dir=preset.base_dir)


def _numbers(rep: Report, number: int | None) -> dict[str, Any] | None:
    if number is None:
        return None
    m = rep.measured.get(number, {}).get(LEVEL)
    if m is None:
        return None
    p = next((p for p in (*rep.points, *rep.pruned) if p.trial_number == number), None)
    out: dict[str, Any] = {"trial": number, "params": dict(p.params) if p else None}
    out.update({k: m.get(k) for k in _SHOWN})
    vs = [v for v in rep.verdicts.get(number, []) if v.concurrency == LEVEL]
    if vs:
        out["verdict"] = vs[0].state
        out["speedup"] = round(vs[0].speedup, 4)
        out["against_trial"] = rep.baselines.for_trial(number)
    if p is not None:
        out["feasible"] = p.feasible
    return out


def summarise(store: Store, job_id: int) -> dict[str, Any]:
    """Per max_num_seqs class at concurrency 4: its baseline and its best speculative trial,
    and whether TTFT is higher at the smaller batch for both."""
    rep = job_report(store, job_id, concurrency=LEVEL)
    metric, direction = rep.objectives[0]
    sign = -1.0 if direction == "maximize" else 1.0
    classes: dict[str, Any] = {}
    for seqs in sorted(set(rep.baselines.seqs.values())):
        base = next((n for n in rep.baselines.all if rep.baselines.seqs.get(n) == seqs), None)
        spec = [
            p
            for p in (*rep.points, *rep.pruned)
            if p.method != "none" and p.params.get("max_num_seqs") == seqs
        ]
        best = min(spec, key=lambda p: sign * float(p.metrics.get(metric) or 0.0), default=None)
        classes[str(seqs)] = {
            "baseline": _numbers(rep, base),
            "winner": _numbers(rep, best.trial_number if best else None),
        }
    queues = {}
    for role in ("baseline", "winner"):
        two, four = (classes.get(s, {}).get(role) for s in ("2", "4"))
        if two and four and two.get("p99_ttft_ms") and four.get("p99_ttft_ms"):
            queues[role] = {
                "p99_ttft_higher_at_2": two["p99_ttft_ms"] > four["p99_ttft_ms"],
                "mean_ttft_higher_at_2": (two["mean_ttft_ms"] or 0) > (four["mean_ttft_ms"] or 0),
            }
    return {
        "job_id": job_id,
        "concurrency": LEVEL,
        "slo": rep.slo,
        "objective": metric,
        "job_winner": rep.winner.trial_number if rep.winner else None,
        "classes": classes,
        "queueing_as_expected": queues,
    }


def _row(name: str, d: dict[str, Any] | None) -> str:
    if not d:
        return f"  {name:9s} not measured"
    cells = "  ".join(
        f"{k} {d[k]:.1f}" if isinstance(d.get(k), float) else f"{k} -" for k in _SHOWN
    )
    extra = (
        f"  {d['verdict']} x{d['speedup']:.2f} vs trial {d['against_trial']}"
        if d.get("verdict")
        else ""
    )
    return f"  {name:9s} trial {d['trial']}: {cells}{extra}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--space", default=str(REPO / "search_spaces" / "tiny-cpu.yaml"))
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--slo-p99-ttft-ms", type=float, default=1500.0)
    ap.add_argument("--work-dir", default=str(REPO / ".spectune"))
    ap.add_argument("--job", type=int, help="only summarise this job of --db")
    args = ap.parse_args(argv)

    # SIGTERM unwinds like Ctrl-C (as the CLI does): the engine in flight is stopped by its
    # context manager instead of being orphaned.
    def _term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _term)
    store = Store(args.db)
    t0 = time.monotonic()
    job_id = args.job
    if job_id is None:
        space = build_space(load_space(args.space), args.trials, args.slo_p99_ttft_ms)
        job_id = create_job(store, space)

        def on_trial(ev: Any) -> None:
            p = ev.params
            print(
                f"{time.monotonic() - t0:6.0f}s trial {ev.number} {ev.state}: {p.get('method')} "
                f"k={p.get('num_speculative_tokens')} seqs={p.get('max_num_seqs')}: {ev.summary}",
                file=sys.stderr,
                flush=True,
            )

        run_job(store, job_id, work_dir=Path(args.work_dir), on_trial=on_trial)
    out = summarise(store, job_id)
    out["seconds"] = round(time.monotonic() - t0, 1)
    print(f"job {job_id}: concurrency {LEVEL}, SLO {out['slo']}, objective {out['objective']}")
    for seqs, c in out["classes"].items():
        print(
            f"max_num_seqs {seqs} (running batch {min(int(seqs), LEVEL)} at concurrency {LEVEL}):"
        )
        print(_row("baseline", c["baseline"]))
        print(_row("winner", c["winner"]))
    for role, q in out["queueing_as_expected"].items():
        print(
            f"{role}: p99 TTFT higher at 2: {q['p99_ttft_higher_at_2']}, "
            f"mean: {q['mean_ttft_higher_at_2']}"
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
