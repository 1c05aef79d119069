"""One function per ``spectune`` command: parse nothing, print, return the exit code.

Nothing here imports the web framework: ``serve`` and ``worker`` (``_service.py``, which
starts the API) are loaded when one of them runs, so every other command starts without
FastAPI and uvicorn."""

from __future__ import annotations

import argparse
import csv
import importlib
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.cli._common import (
    EXIT_FAIL,
    EXIT_INFEASIBLE,
    EXIT_INPUT,
    EXIT_OK,
    err,
    print_json,
    shown,
)
from tuner.cli._offline_text import offline_text
from tuner.cli._plan import plan_space, plan_text, valid_line
from tuner.cli._render import (
    Progress,
    other_target_text,
    report_text,
    table,
)
from tuner.cli._search_text import engine_build_text, search_text
from tuner.cli._trials_text import trials_rows, trials_table
from tuner.errors import InvalidInput
from tuner.explain import explain, param_importances
from tuner.export import ExportError, export_job
from tuner.job import create_job, run_job
from tuner.measure import load_all_prompts
from tuner.pareto import Report, job_report
from tuner.report import ReportQuery, pareto, resolve_query
from tuner.space import SpaceError, load_space
from tuner.states import TRIAL_FINISHED, JobState, TrialState
from tuner.storage import (
    JobNotFound,
    SpaceRefused,
    Store,
    current_revision,
    database_url,
    upgrade,
)
from tuner.workloads import WorkloadError

__all__ = ["EXIT_FAIL", "EXIT_INFEASIBLE", "EXIT_INPUT", "EXIT_OK", "COMMANDS", "err"]


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
    print(f"job {job_id}: {space.name}, {n} trials, database {shown(store.url)}", file=sys.stderr)
    return _run_to_end(store, job_id, args)


def cmd_resume(args: argparse.Namespace) -> int:
    """An interrupted ``spectune run`` goes on: finished trials are kept and counted, the
    trial in flight when it stopped counts as failed, the rest of the budget runs."""
    store = _store(args)
    try:
        job = store.job(args.job_id)
        done = sum(r.state != TrialState.WAITING for r in store.trial_records(args.job_id))
    except JobNotFound as e:
        err(str(e))
        return EXIT_INPUT
    why = None
    if job.for_worker:
        why = "was submitted through the API: a worker runs it (it re-claims stopped jobs)"
    elif job.state == JobState.SUCCEEDED:
        why = "has finished; nothing to resume (spectune report shows it)"
    elif job.state == JobState.RUNNING and not args.force:
        why = (
            "is marked running: another spectune run may still be running it. If that "
            "process is gone (killed, machine restarted), resume with --force"
        )
    if why is not None:
        err(f"job {args.job_id} {why}")
        return EXIT_INPUT
    print(
        f"job {args.job_id}: resuming {job.name} ({job.state}, {done}/{job.n_trials} trials "
        f"done), database {shown(store.url)}",
        file=sys.stderr,
    )
    return _run_to_end(store, args.job_id, args, done=done)


def _run_to_end(store: Store, job_id: int, args: argparse.Namespace, done: int = 0) -> int:
    """Run (or resume) the job with progress on stderr, then its report."""
    n = store.job(job_id).n_trials
    prog = Progress(n)
    t0 = time.monotonic()
    try:
        run_job(
            store, job_id, work_dir=Path(args.work_dir), on_trial=prog.done, on_start=prog.start
        )
    except SpaceRefused as e:  # stored by an older version: run_job has failed the job
        err(str(e))
        return EXIT_INPUT
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
    took = f"job {job_id} finished in {time.monotonic() - t0:.0f} s ({launches})"
    if args.json:
        print(took, file=sys.stderr)
        print_json(_report_document(store, job_id, None, None))
    else:
        print(f"\n{took}\n")
        _print_report(store, job_id, rep)
    return EXIT_OK if rep.winner is not None else EXIT_INFEASIBLE


def _report_document(store: Store, job_id: int, concurrency: int | None, slo: dict | None) -> Any:
    """The same document as ``GET /api/jobs/{id}/pareto``: one shape for scripts and UI."""
    q = ReportQuery(workload=None, concurrency=concurrency, slo=slo or {})
    return pareto(store, job_id, q).model_dump(mode="json")


def _print_report(store: Store, job_id: int, rep: Report) -> None:
    print(report_text(rep, explain(rep, param_importances(store, job_id))))
    if reason := store.job(job_id).stop_reason:
        print(f"\nWhy the job stopped: {reason}")
    recs = store.trial_records(job_id)
    if text := offline_text(recs, store.job(job_id).offline_prices):
        print()
        print(text)
    if text := search_text(recs):
        print("\n" + text)
    if text := engine_build_text(recs):
        print("\n" + text)
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


def _warn_refused(store: Store, job_id: int) -> None:
    """A job whose stored space today's rules refuse reads with defaults for those fields:
    say so on stderr, so nobody takes its report for the space it ran with."""
    if (why := store.space_refusal(job_id)) is not None:
        print(
            f"spectune: warning: job {job_id}: {why} (read with today's defaults for them)",
            file=sys.stderr,
        )


def cmd_report(args: argparse.Namespace) -> int:
    """The finished (or running) job's report again, at any level and SLO; nothing re-runs."""
    store = Store(database_url(args.db))
    slo = {"p99_tpot_ms": args.slo_p99_tpot_ms} if args.slo_p99_tpot_ms else None
    try:
        q = ReportQuery(workload=args.workload, concurrency=args.concurrency, slo=slo or {})
        # refuses a workload or level the job did not measure, naming them
        resolve_query(store.space(args.job, for_reading=True), q)
        rep = job_report(
            store, args.job, workload=args.workload, concurrency=args.concurrency, slo=slo
        )
        doc = pareto(store, args.job, q).model_dump(mode="json") if args.json else None
    except JobNotFound as e:
        err(str(e))
        return EXIT_INPUT
    except InvalidInput as e:
        err(str(e))  # each refused field's reason, joined by "; "
        return EXIT_INPUT
    except SpaceRefused as e:  # its stored space cannot be read even with defaults
        err(str(e))
        return EXIT_INPUT
    _warn_refused(store, args.job)
    if doc is not None:
        print_json(doc)
    else:
        _print_report(store, args.job, rep)
    return EXIT_OK if rep.winner is not None else EXIT_INFEASIBLE


def cmd_jobs(args: argparse.Namespace) -> int:
    found, _ = _store(args).list_jobs()
    jobs = [
        {
            "id": j.job_id,
            "name": j.name,
            "state": j.state,
            "n_trials": j.n_trials,
            "trials_done": sum(1 for t in j.trials if t.state in TRIAL_FINISHED),
            "engine_launches": j.engine_launches,
            "confirm_launches": j.confirm_launches or 0,
            "engine_startup_s": round(j.engine_startup_s, 1),
            "stop_reason": j.stop_reason,
            "created_at": j.created_at.isoformat() + "Z",
            "finished_at": j.finished_at.isoformat() + "Z" if j.finished_at else None,
            "error": j.error,
        }
        for j in sorted(found, key=lambda j: j.job_id)
    ]
    if args.json:
        print_json(jobs)
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
    store = _store(args)
    try:
        recs = store.trial_records(args.job_id)
    except JobNotFound as e:
        err(str(e))
        return EXIT_INPUT
    _warn_refused(store, args.job_id)
    if args.json:
        print_json([r.flat() for r in recs])
        return EXIT_OK
    if args.csv:
        header, rows = trials_rows(recs)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        sys.stdout.write(buf.getvalue())
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
        text = export_job(store, args.job_id, args.format, **kw)
    except JobNotFound as e:
        err(str(e))
        return EXIT_INPUT
    except ExportError as e:
        err(str(e))
        return EXIT_INFEASIBLE
    except SpaceRefused as e:  # today's rules refuse its stored space: not what was measured
        err(str(e))
        return EXIT_INPUT
    if not args.json:
        print(text)
        return EXIT_OK
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None  # a command line, not a document
    print_json({"job_id": args.job_id, "format": args.format, "output": text, "parsed": parsed})
    return EXIT_OK


def _space_error_document(source: str, e: Exception) -> dict[str, Any]:
    """``plan --json`` and ``validate --json`` on a bad space: each field's path and reason."""
    fields = [{"loc": list(loc), "msg": msg} for loc, msg in getattr(e, "errors", ())]
    return {"space": source, "valid": False, "error": str(e), "errors": fields}


def cmd_plan(args: argparse.Namespace) -> int:
    """Validate, pre-flight every grid configuration, estimate launches and time."""
    try:
        space = load_space(args.space)
        plan = plan_space(space, args.space, database_url(args.db))
    except (SpaceError, WorkloadError) as e:
        if args.json:
            print_json(_space_error_document(args.space, e))
        err(str(e))
        return EXIT_INPUT
    if args.json:
        print_json(plan)
    else:
        print(plan_text(plan))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        space = load_space(args.space)
        n = sum(len(p) for p in load_all_prompts(space).values())
    except (SpaceError, WorkloadError) as e:
        if args.json:
            print_json(_space_error_document(args.space, e))
        err(str(e))
        return EXIT_INPUT
    methods = space.methods.enabled()
    if args.json:
        print_json({"space": args.space, "valid": True, "name": space.name, "methods": methods})
        return EXIT_OK
    print(valid_line(args.space, space.name, methods, n))
    return EXIT_OK


def cmd_db(args: argparse.Namespace) -> int:
    url = database_url(args.db)
    upgrade(url)
    rev = current_revision(url)
    # Queued or running jobs stored with values today's rules refuse could never run: failed
    # now, with the reason, rather than left for a worker to claim and refuse.
    failed = Store(url).fail_refused_jobs()
    for job_id, why in failed:
        print(f"spectune: job {job_id} failed: {why}", file=sys.stderr)
    if args.json:
        fails = [{"id": job_id, "error": why} for job_id, why in failed]
        print_json({"database": shown(url), "revision": rev, "failed_jobs": fails})
    else:
        print(f"{shown(url)}: schema at {rev}")
    return EXIT_OK


def _service_command(name: str) -> Callable[[argparse.Namespace], int]:
    """``spectune serve`` / ``worker``: ``tuner.cli._service`` (it imports the API, FastAPI
    and uvicorn) is loaded when the command runs, not when the CLI starts."""

    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module("tuner.cli._service"), name)(args)

    run.__name__ = run.__qualname__ = name
    return run


COMMANDS = {
    "run": cmd_run,
    "resume": cmd_resume,
    "plan": cmd_plan,
    "jobs": cmd_jobs,
    "trials": cmd_trials,
    "report": cmd_report,
    "export": cmd_export,
    "validate": cmd_validate,
    "db": cmd_db,
    "serve": _service_command("cmd_serve"),
    "worker": _service_command("cmd_worker"),
}
