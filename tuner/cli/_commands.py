"""One function per ``spectune`` command: parse nothing, print, return the exit code."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import ValidationError

from tuner.api import ServiceSettings, create_app
from tuner.cli._render import Progress, other_target_text, report_text, table, trials_table
from tuner.explain import explain, param_importances
from tuner.export import ExportError, export_job
from tuner.job import create_job, run_job
from tuner.measure import load_all_prompts
from tuner.pareto import Report, job_report
from tuner.space import SpaceError, load_space
from tuner.storage import JobNotFound, Store, current_revision, database_url, upgrade
from tuner.worker import Worker
from tuner.workloads import WorkloadError

__all__ = ["EXIT_FAIL", "EXIT_INFEASIBLE", "EXIT_INPUT", "EXIT_OK", "COMMANDS", "err"]

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3


def err(msg: str) -> None:
    print(f"spectune: error: {msg}", file=sys.stderr)


def _store(args: argparse.Namespace) -> Store:
    store = Store(database_url(args.db))
    store.ensure_schema()
    return store


def cmd_run(args: argparse.Namespace) -> int:
    store = Store(database_url(args.db))
    try:
        space = load_space(args.space)
        yaml_text = Path(args.space).read_text()
        job_id = create_job(store, space, space_yaml=yaml_text, n_trials=args.trials)
    except (SpaceError, WorkloadError) as e:
        err(str(e))
        return EXIT_INPUT
    n = args.trials or space.trials
    print(f"job {job_id}: {space.name}, {n} trials, database {store.url}", file=sys.stderr)
    prog = Progress(n)
    t0 = time.monotonic()
    run_job(store, job_id, work_dir=Path(args.work_dir), on_trial=prog.done, on_start=prog.start)
    rep = job_report(store, job_id)
    job = store.job(job_id)
    if rep.replay_surface is not None:
        launches = (
            f"{job.engine_launches} configurations answered from the recorded "
            "surface; no engine was launched"
        )
    else:
        launches = (
            f"{job.engine_launches} engine launches for the search, "
            f"{job.confirm_launches} to confirm; {job.engine_startup_s:.0f} s starting engines"
        )
    print(f"\njob {job_id} finished in {time.monotonic() - t0:.0f} s ({launches})\n")
    _print_report(store, job_id, rep)
    return EXIT_OK if rep.winner is not None else EXIT_INFEASIBLE


def _print_report(store: Store, job_id: int, rep: Report) -> None:
    print(report_text(rep, explain(rep, param_importances(store, job_id))))
    for other in rep.other_targets:
        orep = job_report(
            store,
            job_id,
            workload=rep.workload,
            concurrency=rep.concurrency,
            slo=rep.slo,
            target=other,
        )
        print(other_target_text(orep, rep.target))


def cmd_report(args: argparse.Namespace) -> int:
    """The finished (or running) job's report again, at any level and SLO; nothing re-runs."""
    store = Store(database_url(args.db))
    slo = {"p99_tpot_ms": args.slo_p99_tpot_ms} if args.slo_p99_tpot_ms else None
    try:
        rep = job_report(store, args.job, concurrency=args.concurrency, slo=slo)
    except JobNotFound as e:
        err(str(e))
        return EXIT_INPUT
    _print_report(store, args.job, rep)
    return EXIT_OK if rep.winner is not None else EXIT_INFEASIBLE


def cmd_jobs(args: argparse.Namespace) -> int:
    rows_, _ = _store(args).list_jobs()
    jobs = [
        {
            "id": j.job_id,
            "name": j.name,
            "state": j.state,
            "n_trials": j.n_trials,
            "trials_done": sum(1 for t in j.trials if t.state in ("complete", "fail", "pruned")),
            "engine_launches": j.engine_launches,
            "engine_startup_s": round(j.engine_startup_s, 1),
            "created_at": j.created_at.isoformat() + "Z",
            "finished_at": j.finished_at.isoformat() + "Z" if j.finished_at else None,
            "error": j.error,
        }
        for j in sorted(rows_, key=lambda j: j.job_id)
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
    print(table(rows, ["id", "name", "state", "trials", "launches", "created"]))
    return EXIT_OK


def cmd_trials(args: argparse.Namespace) -> int:
    try:
        recs = _store(args).trial_records(args.job_id)
    except JobNotFound as e:
        err(str(e))
        return EXIT_INPUT
    if args.json:
        print(json.dumps([r.flat() for r in recs], indent=2))
        return EXIT_OK
    print(trials_table(recs))
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    store = _store(args)
    slo = {}
    if args.slo_p99_tpot_ms is not None:
        slo["p99_tpot_ms"] = args.slo_p99_tpot_ms
    if args.slo_p99_ttft_ms is not None:
        slo["p99_ttft_ms"] = args.slo_p99_ttft_ms
    kw = {"workload": args.workload, "concurrency": args.concurrency, "slo": slo or None}
    try:
        print(export_job(store, args.job_id, args.format, **kw))
    except JobNotFound as e:
        err(str(e))
        return EXIT_INPUT
    except ExportError as e:
        err(str(e))
        return EXIT_INFEASIBLE
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        space = load_space(args.space)
        n = sum(len(p) for p in load_all_prompts(space).values())
    except (SpaceError, WorkloadError) as e:
        err(str(e))
        return EXIT_INPUT
    methods = ", ".join(space.methods.enabled())
    print(f"{args.space}: valid ({space.name}; methods {methods}; {n} prompts)")
    return EXIT_OK


def cmd_db(args: argparse.Namespace) -> int:
    url = database_url(args.db)
    upgrade(url)
    print(f"{url}: schema at {current_revision(url)}")
    return EXIT_OK


def _service_settings(args: argparse.Namespace, **extra: Any) -> ServiceSettings | None:
    """Environment (SPECTUNE_*) first, then the flags given; unsafe settings are refused."""
    given: dict[str, Any] = {"database_url": database_url(args.db), **extra}
    if getattr(args, "work_dir", None):
        given["work_dir"] = Path(args.work_dir)
    try:
        return ServiceSettings(**given)
    except ValidationError as e:
        for e_ in e.errors():
            err(e_["msg"].removeprefix("Value error, "))
        return None


def cmd_serve(args: argparse.Namespace) -> int:
    """API + web UI + (unless --no-worker) an embedded worker, in one process."""
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
    Store(settings.database_url).ensure_schema()  # refuse an out-of-date database first
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
    settings = _service_settings(args)
    if settings is None:
        return EXIT_INPUT
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("spectune").setLevel(logging.INFO)
    store = Store(settings.database_url)
    store.ensure_schema()
    w = Worker(
        store,
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
        err("interrupted; the running job (if any) is back in the queue")
        return 130
    return EXIT_OK


COMMANDS = {
    "run": cmd_run,
    "jobs": cmd_jobs,
    "trials": cmd_trials,
    "report": cmd_report,
    "export": cmd_export,
    "validate": cmd_validate,
    "db": cmd_db,
    "serve": cmd_serve,
    "worker": cmd_worker,
}
