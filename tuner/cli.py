"""``spectune``: the command line. Its output and exit codes are a contract scripts rely on.

Exit codes: 0 success; 1 runtime failure; 2 bad input (search space, job id, format);
3 the job ran but no configuration is feasible under the SLO (nothing to export).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3


def _err(msg: str) -> None:
    print(f"spectune: error: {msg}", file=sys.stderr)


def _fmt(v: Any, spec: str = ".1f") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def _params_text(params: dict[str, Any]) -> str:
    m = params["method"]
    on = f" on {Path(params['target']).name}" if params.get("target") else ""
    if m == "none":
        return "baseline (no speculation)" + on
    out = f"{m} k={params['num_speculative_tokens']}"
    if m == "ngram":
        out += f" lookup={params['prompt_lookup_min']}..{params['prompt_lookup_max']}"
    if m == "draft_model":
        out += f" draft={Path(params['draft']).name}"
    if m in ("eagle", "eagle3"):
        out += f" head={Path(params['head']).name}"
    return out + on


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


class _Progress:
    """One line per trial on stderr: a bar, what is being launched, then the result."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.t0 = time.monotonic()

    def _bar(self, done: int) -> str:
        width = 20
        fill = int(width * done / max(1, self.n))
        return "[" + "#" * fill + "-" * (width - fill) + f"] {done}/{self.n}"

    def start(self, number: int, params: dict[str, Any]) -> None:
        el = time.monotonic() - self.t0
        if params.get("confirm"):
            msg = f"confirming trial {number}: {_params_text(params)} (second launch) ..."
            print(f"{self._bar(self.n)}  {el:6.0f}s  {msg}", file=sys.stderr, flush=True)
            return
        print(
            f"{self._bar(number)}  {el:6.0f}s  trial {number}: {_params_text(params)} "
            f"max_num_seqs={params['max_num_seqs']} ...",
            file=sys.stderr,
            flush=True,
        )

    def done(self, ev) -> None:  # noqa: ANN001
        if ev.state == "confirmed":
            print(f"{self._bar(self.n)}  trial {ev.number} confirmed in {ev.seconds:.0f}s: "
                  f"{ev.summary}", file=sys.stderr, flush=True)  # fmt: skip
            return
        print(
            f"{self._bar(ev.number + 1)}  trial {ev.number} {ev.state} in {ev.seconds:.0f}s: "
            f"{ev.summary}",
            file=sys.stderr,
            flush=True,
        )


def _ci(m: dict[str, Any], name: str, spec: str) -> str:
    """Median with its 95 % interval over repeats: ``123.4 [118.0-128.9]``."""
    v = m.get(name)
    if v is None:
        return "-"
    st = (m.get("stats") or {}).get(name)
    if not st or st.get("n", 1) < 2:
        return format(v, spec)
    return f"{format(v, spec)} [{format(st['ci95_low'], spec)}-{format(st['ci95_high'], spec)}]"


def _report_text(rep, why: list[str] | None = None) -> str:  # noqa: ANN001
    from tuner.export import export_point
    from tuner.pareto import Point

    lines = []
    if rep.replay_surface is not None:
        lines.append(
            f"REPLAY: every number below was answered from the recorded surface "
            f"{rep.replay_surface}; no engine ran in this job (search benchmarking only)."
        )
    lines += [
        f"Pareto front at concurrency {rep.concurrency}, workload {rep.workload}, "
        f"SLO {rep.slo or 'none'} (objectives: "
        + ", ".join(f"{d} {m}" for m, d in rep.objectives)
        + "; medians of repeats, [95% interval])"
    ]
    header = ["trial", "configuration", "tok/s", "p99 TPOT ms", "p99 TTFT ms", "accept",
              "mean acc len", "speedup", "greedy match", "KV tokens", "feasible"]  # fmt: skip
    rows = []
    shown = list(rep.front)
    if rep.baseline is not None and rep.baseline not in shown:
        shown.append(rep.baseline)
    for p in shown:
        m = p.metrics
        sp = rep.speedup(p)
        rows.append(
            [
                str(p.trial_number) + ("*" if p is rep.winner else "")
                + ("c" if m.get("confirmed") else ""),
                _params_text(p.params) + f" seqs={p.params['max_num_seqs']}",
                _ci(m, "output_tok_per_s", ".1f"),
                _ci(m, "p99_tpot_ms", ".2f"),
                _fmt(m.get("p99_ttft_ms"), ".1f"),
                "-" if m.get("acceptance_rate") is None else f"{m['acceptance_rate']:.1%}",
                _fmt(m.get("mean_acceptance_length"), ".2f"),
                "-" if sp is None else f"{sp:.2f}x",
                "ref" if p.method == "none" else (
                    "-" if p.lossless_match_rate is None else f"{p.lossless_match_rate:.0%}"),
                _fmt(p.kv_cache_tokens),
                "yes" if p.feasible else "no: " + "; ".join(p.violations),
            ]
        )  # fmt: skip
    for r in rep.references:
        m = r.metrics or {}
        sp = rep.speedup(Point(-1, "hosted", {}, {}, m, r.feasible, r.violations)) if m else None
        rows.append(
            ["hosted", f"{r.name}: {r.model} at {r.base_url}",
             _ci(m, "output_tok_per_s", ".1f"), _ci(m, "p99_tpot_ms", ".2f"),
             _fmt(m.get("p99_ttft_ms"), ".1f"), "-", "-",
             "-" if sp is None else f"{sp:.2f}x", "-", "-",
             ("yes" if r.feasible else "no: " + "; ".join(r.violations))
             + (f" ({r.error})" if r.error else "")]
        )  # fmt: skip
    lines.append(_table(rows, header))
    lines.append(
        "(* winner; c: confirmed by a second launch; the baseline row is the same target "
        "without speculation"
        + ("; hosted rows: endpoints measured with the same workload and load generator, "
           "never candidates" if rep.references else "")
        + ")"
    )
    lines += ["", _levels_text(rep)]
    if why:
        lines += ["", "Why this winner:"] + [f"- {w}" for w in why]
    if rep.winner is None:
        lines.append("No configuration is feasible under the SLO: nothing to export.")
        return "\n".join(lines)
    if rep.replay_surface is not None:
        return "\n".join(lines)
    lines.append("")
    lines.append("Winner --speculative-config:")
    lines.append(export_point(rep.winner, "vllm-json"))
    lines.append("Winner command line:")
    lines.append(export_point(rep.winner, "vllm-cli"))
    from tuner.export import depth_schedule

    sched = depth_schedule(rep)
    if sched is not None:
        lines.append("The best depth differs by concurrency; as a batch-size schedule "
                     "(export --format vllm-schedule-json):")
        lines.append(export_point(rep.winner, "vllm-schedule-json", rep))
    return "\n".join(lines)


def other_targets_text(url: str, job_id: int, rep) -> str:  # noqa: ANN001
    """One report per other checkpoint the job served (an MTP model), each against its own
    baseline."""
    from tuner.explain import explain
    from tuner.pareto import job_report

    out = []
    for other in rep.other_targets:
        orep = job_report(url, job_id, workload=rep.workload, concurrency=rep.concurrency,
                          slo=rep.slo, target=other)  # fmt: skip
        out += [f"\nAnother target in this job: {other}",
                f"(served instead of {rep.target} by some methods: compared only with its own "
                "baseline, never with the one above)",
                _report_text(orep, explain(orep, {}, 0))]  # fmt: skip
    return "\n".join(out)


def _levels_text(rep) -> str:  # noqa: ANN001
    """Per-concurrency round-cost verdicts: time per committed token against the baseline."""
    levels = sorted(rep.baseline_by_conc)
    out = [
        f"Round-cost verdict per concurrency (workload {rep.workload}): mean time per output "
        "token against the baseline's at the same level"
    ]
    if not levels:
        return out[0] + "\n  (no baseline measured: no verdict)"
    header = ["trial", "configuration"] + [f"c={c}" for c in levels] + ["stops paying at"]
    base = rep.baseline_by_conc
    rows = [
        ["base", "baseline (no speculation)"]
        + [f"{_fmt(base[c].get('mean_tpot_ms'), '.2f')} ms/tok" for c in levels]
        + ["-"]
    ]
    names = {p.trial_number: p for p in rep.points}
    cut = {p.trial_number for p in rep.pruned}
    names.update({p.trial_number: p for p in rep.pruned})
    for number, vs in sorted(rep.verdicts.items()):
        p = names.get(number)
        by_c = {v.concurrency: v for v in vs}
        cells = []
        for c in levels:
            v = by_c.get(c)
            cells.append(
                "-"
                if v is None
                else f"{v.spec_ms_per_token:.2f} ms/tok {'+' if v.pays_off else '-'}"
                f"{abs(v.margin_pct):.0f}%"
            )
        cross = rep.crossover.get(number)
        first = vs[0].pays_off if vs else False
        where = (
            "never pays"
            if vs and not first and cross == vs[0].concurrency
            else "-"
            if cross is None
            else f"concurrency {cross}"
        )
        label = _params_text(p.params) if p is not None else f"trial {number}"
        if number in cut:
            label += " (pruned: first level only)"
            where = "-" if not vs or vs[0].pays_off else f"no pay at c={vs[0].concurrency}"
        rows.append([str(number), label, *cells, where])
    out.append(_table(rows, header))
    out.append("(+N%: pays off by N%, -N%: does not pay by N%"
               + ("; pruned trials stopped after the objective level" if cut else "") + ")")
    return "\n".join(out)


def cmd_run(args: argparse.Namespace) -> int:
    from tuner.space import SpaceError, load_space
    from tuner.storage import database_url
    from tuner.study import create_job, run_job
    from tuner.workloads import WorkloadError

    try:
        space = load_space(args.space)
        url = database_url(args.db)
        job_id = create_job(
            url, space, space_yaml=Path(args.space).read_text(), n_trials=args.trials
        )
    except (SpaceError, WorkloadError) as e:
        _err(str(e))
        return EXIT_INPUT
    n = args.trials or space.trials
    print(f"job {job_id}: {space.name}, {n} trials, database {url}", file=sys.stderr)
    prog = _Progress(n)
    t0 = time.monotonic()
    run_job(url, job_id, work_dir=Path(args.work_dir), on_trial=prog.done, on_start=prog.start)
    from tuner.pareto import job_report

    rep = job_report(url, job_id)
    from tuner.storage import JobModel, session_scope

    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        assert job is not None
        launches = (f"{job.engine_launches} engine launches for the search, "
                    f"{job.confirm_launches} to confirm; {job.engine_startup_s:.0f} s starting "
                    "engines")  # fmt: skip
        if space.engine.kind == "replay":
            launches = (f"{job.engine_launches} configurations answered from the recorded "
                        "surface; no engine was launched")  # fmt: skip
    print(f"\njob {job_id} finished in {time.monotonic() - t0:.0f} s ({launches})\n")
    _print_report(url, job_id, rep)
    return EXIT_OK if rep.winner is not None else EXIT_INFEASIBLE


def _print_report(url: str, job_id: int, rep) -> None:  # noqa: ANN001
    from tuner.explain import explain, param_importances

    imp, n_imp = param_importances(url, job_id)
    print(_report_text(rep, explain(rep, imp, n_imp)))
    if rep.other_targets:
        print(other_targets_text(url, job_id, rep))


def cmd_report(args: argparse.Namespace) -> int:
    """The finished (or running) job's report again, at any level and SLO; nothing re-runs."""
    from tuner.pareto import job_report
    from tuner.storage import database_url
    from tuner.study import JobNotFound

    url = database_url(args.db)
    slo = {"p99_tpot_ms": args.slo_p99_tpot_ms} if args.slo_p99_tpot_ms else None
    try:
        rep = job_report(url, args.job, concurrency=args.concurrency, slo=slo)
    except JobNotFound as e:
        _err(str(e))
        return EXIT_INPUT
    _print_report(url, args.job, rep)
    return EXIT_OK if rep.winner is not None else EXIT_INFEASIBLE


def cmd_jobs(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from tuner.storage import JobModel, database_url, ensure_schema, session_scope

    url = database_url(args.db)
    ensure_schema(url)
    with session_scope(url) as s:
        jobs = [
            {
                "id": j.job_id,
                "name": j.name,
                "state": j.state,
                "n_trials": j.n_trials,
                "trials_done": sum(
                    1 for t in j.trials if t.state in ("complete", "fail", "pruned")
                ),
                "engine_launches": j.engine_launches,
                "engine_startup_s": round(j.engine_startup_s, 1),
                "created_at": j.created_at.isoformat() + "Z",
                "finished_at": j.finished_at.isoformat() + "Z" if j.finished_at else None,
                "error": j.error,
            }
            for j in s.scalars(select(JobModel).order_by(JobModel.job_id))
        ]
    if args.json:
        print(json.dumps(jobs, indent=2))
        return EXIT_OK
    rows = [
        [
            str(j["id"]),
            j["name"],
            j["state"],
            f"{j['trials_done']}/{j['n_trials']}",
            str(j["engine_launches"]),
            j["created_at"],
        ]
        for j in jobs
    ]
    print(_table(rows, ["id", "name", "state", "trials", "launches", "created"]))
    return EXIT_OK


def cmd_trials(args: argparse.Namespace) -> int:
    from tuner.storage import database_url, ensure_schema
    from tuner.study import JobNotFound, trial_records

    url = database_url(args.db)
    ensure_schema(url)
    try:
        recs = trial_records(url, args.job_id)
    except JobNotFound as e:
        _err(str(e))
        return EXIT_INPUT
    if args.json:
        print(json.dumps(recs, indent=2))
        return EXIT_OK
    rows = []
    for r in recs:
        rows.append(
            [
                str(r["number"]),
                r["state"],
                _params_text(r["params"]) if "max_num_seqs" in r["params"] else str(r["params"]),
                _fmt(r.get("output_tok_per_s")),
                _fmt(r.get("p99_tpot_ms"), ".2f"),
                "-" if r.get("acceptance_rate") is None else f"{r['acceptance_rate']:.1%}",
                _fmt(r.get("mean_acceptance_length"), ".2f"),
                r["fail_reason"]
                or ("reused " + str(r["reused_from"]) if r["reused_from"] is not None else ""),
            ]
        )
    print(
        _table(
            rows,
            [
                "trial",
                "state",
                "configuration",
                "tok/s",
                "p99 TPOT ms",
                "accept",
                "mean acc len",
                "note",
            ],
        )
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from tuner.export import ExportError, export_job
    from tuner.storage import database_url, ensure_schema
    from tuner.study import JobNotFound

    url = database_url(args.db)
    ensure_schema(url)
    slo = {}
    if args.slo_p99_tpot_ms is not None:
        slo["p99_tpot_ms"] = args.slo_p99_tpot_ms
    if args.slo_p99_ttft_ms is not None:
        slo["p99_ttft_ms"] = args.slo_p99_ttft_ms
    kw = {"workload": args.workload, "concurrency": args.concurrency, "slo": slo or None}
    try:
        print(export_job(url, args.job_id, args.format, **kw))
    except JobNotFound as e:
        _err(str(e))
        return EXIT_INPUT
    except ExportError as e:
        _err(str(e))
        return EXIT_INFEASIBLE
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from tuner.space import SpaceError, load_space
    from tuner.study import load_all_prompts
    from tuner.workloads import WorkloadError

    try:
        space = load_space(args.space)
        n = sum(len(p) for p in load_all_prompts(space).values())
    except (SpaceError, WorkloadError) as e:
        _err(str(e))
        return EXIT_INPUT
    print(
        f"{args.space}: valid ({space.name}; methods {', '.join(space.methods.enabled())}; "
        f"{n} prompts)"
    )
    return EXIT_OK


def cmd_db(args: argparse.Namespace) -> int:
    from tuner.storage import current_revision, database_url, upgrade

    url = database_url(args.db)
    upgrade(url)
    print(f"{url}: schema at {current_revision(url)}")
    return EXIT_OK


def _service_settings(args: argparse.Namespace, **extra: Any):  # noqa: ANN202
    """Environment (SPECTUNE_*) first, then the flags given; unsafe settings are refused."""
    from pydantic import ValidationError

    from tuner.api.settings import ServiceSettings
    from tuner.storage import database_url

    given: dict[str, Any] = {"database_url": database_url(args.db), **extra}
    if getattr(args, "work_dir", None):
        given["work_dir"] = Path(args.work_dir)
    try:
        return ServiceSettings(**given)
    except ValidationError as e:
        for err in e.errors():
            _err(err["msg"].removeprefix("Value error, "))
        return None


def cmd_serve(args: argparse.Namespace) -> int:
    """API + web UI + (unless --no-worker) an embedded worker, in one process."""
    import uvicorn

    from tuner.api import create_app

    extra: dict[str, Any] = {"embedded_worker": not args.no_worker}
    if args.host is not None:
        extra["host"] = args.host
    if args.port is not None:
        extra["port"] = args.port
    if args.allow_unauthenticated_remote:
        extra["allow_unauthenticated_remote"] = True
    settings = _service_settings(args, **extra)
    if settings is None:
        return EXIT_INPUT
    from tuner.storage import ensure_schema

    ensure_schema(settings.database_url)  # refuse an out-of-date database before binding
    auth = "on" if settings.auth_enabled else "off (loopback only)"
    print(
        f"spectune: serving http://{settings.host}:{settings.port}/ (auth {auth}, worker "
        f"{'embedded' if settings.embedded_worker else 'separate'}, database "
        f"{settings.database_url})",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    """A worker alone: claims queued API jobs one at a time (one worker per device)."""
    import logging

    from tuner.storage import ensure_schema
    from tuner.worker import Worker

    settings = _service_settings(args)
    if settings is None:
        return EXIT_INPUT
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("spectune").setLevel(logging.INFO)
    ensure_schema(settings.database_url)
    w = Worker(
        settings.database_url,
        work_dir=settings.work_dir,
        poll_s=settings.worker_poll_s,
        heartbeat_s=settings.worker_heartbeat_s,
        stale_after_s=settings.worker_stale_after_s,
    )
    print(f"spectune: worker {w.worker_id} on {settings.database_url}", file=sys.stderr)
    if args.once:
        job = w.run_once()
        print("no queued job" if job is None else f"ran job {job}", file=sys.stderr)
        return EXIT_OK
    try:
        w.run_forever()
    except KeyboardInterrupt:
        w.stop()  # the job in flight goes back to the queue
        _err("interrupted; the running job (if any) is back in the queue")
        return 130
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spectune",
        description="Tune speculative decoding with real engines on your hardware and workload.",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    db_help = "database URL (default: $SPECTUNE_DATABASE_URL or sqlite:///spectune.db)"

    p = sub.add_parser("run", help="run a tuning job from a search-space YAML")
    p.add_argument("space", help="search space YAML (e.g. search_spaces/tiny-cpu.yaml)")
    p.add_argument("--trials", type=int, help="trial budget (overrides the file's)")
    p.add_argument("--db", help=db_help)
    p.add_argument("--work-dir", default=".spectune", help="engine logs and caches")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("jobs", help="list jobs")
    p.add_argument("--json", action="store_true")
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=cmd_jobs)

    p = sub.add_parser("trials", help="list a job's trials and their metrics")
    p.add_argument("job_id", type=int)
    p.add_argument("--json", action="store_true")
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=cmd_trials)

    p = sub.add_parser("report", help="print a job's Pareto table, verdicts and winner again")
    p.add_argument("job", type=int)
    p.add_argument("--concurrency", type=int, help="level (default: the objective level)")
    p.add_argument("--slo-p99-tpot-ms", type=float, help="re-evaluate under this SLO")
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("export", help="print the winning configuration")
    p.add_argument("job_id", type=int)
    p.add_argument("--format", default="vllm-json",
                   choices=["vllm-json", "vllm-cli", "vllm-schedule-json", "sglang",
                            "trtllm-yaml"])
    p.add_argument("--workload", help="workload name (default: the job's first)")
    p.add_argument("--concurrency", type=int, help="level (default: the objective level)")
    p.add_argument("--slo-p99-tpot-ms", type=float, help="re-evaluate under this SLO")
    p.add_argument("--slo-p99-ttft-ms", type=float, help="re-evaluate under this SLO")
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("validate", help="check a search-space YAML without running anything")
    p.add_argument("space")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("db", help="database maintenance")
    p.add_argument("action", choices=["upgrade"])
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=cmd_db)

    p = sub.add_parser("serve", help="REST API + web UI + an embedded worker")
    p.add_argument("--host", help="bind address (default 127.0.0.1; $SPECTUNE_HOST)")
    p.add_argument("--port", type=int, help="port (default 8000; $SPECTUNE_PORT)")
    p.add_argument("--db", help=db_help)
    p.add_argument("--work-dir", help="engine logs and caches (default .spectune)")
    p.add_argument("--no-worker", action="store_true", help="run workers separately")
    p.add_argument(
        "--allow-unauthenticated-remote",
        action="store_true",
        help="serve a non-loopback address without tokens (trusted networks only)",
    )
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("worker", help="run queued jobs (one at a time) without the API")
    p.add_argument("--db", help=db_help)
    p.add_argument("--work-dir", help="engine logs and caches (default .spectune)")
    p.add_argument("--once", action="store_true", help="run one queued job, then exit")
    p.set_defaults(fn=cmd_worker)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "trials", None) is not None and args.trials < 1:
        _err("--trials: must be at least 1")
        return EXIT_INPUT
    from tuner.storage import StorageError

    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the engine in flight is torn
    # down by its context manager instead of being orphaned.
    def _term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _term)
    try:
        return args.fn(args)
    except StorageError as e:
        _err(str(e))
        return EXIT_FAIL
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
