"""``spectune``: the command line. Its output and exit codes are a contract scripts rely on
(EXIT_CODES below is printed by ``--help`` and repeated in docs/troubleshooting.md)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from importlib.metadata import PackageNotFoundError, version

from tuner.cli._commands import (
    COMMANDS,
    EXIT_FAIL,
    EXIT_INFEASIBLE,
    EXIT_INPUT,
    EXIT_OK,
    err,
)
from tuner.cli._tokens import add_token_parser
from tuner.cli._watch import add_watch_parser
from tuner.engines import EXPORT_FORMATS
from tuner.storage import StorageError

__all__ = [
    "EXIT_CODES",
    "EXIT_FAIL",
    "EXIT_INFEASIBLE",
    "EXIT_INPUT",
    "EXIT_OK",
    "build_parser",
    "main",
]


EXIT_CODES = """exit codes:
  0    success
  1    runtime failure (database, engine, serve on a port in use, anything unexpected)
  2    bad input: search space, job id, export format, flags (argparse's usage errors too)
  3    the job ran but no configuration is feasible under the SLO (nothing to export)
  130  interrupted (Ctrl-C or SIGTERM; the engine in flight is stopped first;
       `spectune resume JOB` continues an interrupted run)

--json prints one JSON document on stdout; progress and errors go to stderr."""


def _version() -> str:
    try:
        return version("spectune")
    except PackageNotFoundError:  # imported from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spectune",
        description="Tune speculative decoding with real engines on your hardware and workload.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"spectune {_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    db_help = "database URL (default: $SPECTUNE_DATABASE_URL or sqlite:///spectune.db)"
    json_help = "print JSON on stdout (progress stays on stderr)"

    p = sub.add_parser("run", help="run a tuning job from a search-space YAML")
    p.add_argument("space", help="search space YAML (e.g. search_spaces/tiny-cpu.yaml)")
    p.add_argument("--trials", type=int, help="trial budget (overrides the file's)")
    p.add_argument("--db", help=db_help)
    p.add_argument("--work-dir", default=".spectune", help="engine logs and caches")
    p.add_argument("--json", action="store_true", help=json_help + "; the report as JSON")
    p.set_defaults(fn=COMMANDS["run"])

    p = sub.add_parser(
        "resume",
        help="continue an interrupted `spectune run` (finished trials are kept)",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job_id", type=int)
    p.add_argument("--db", help=db_help)
    p.add_argument("--work-dir", default=".spectune", help="engine logs and caches")
    p.add_argument("--json", action="store_true", help=json_help + "; the report as JSON")
    p.add_argument(
        "--force",
        action="store_true",
        help="resume a job marked running (its process is known to be gone)",
    )
    p.set_defaults(fn=COMMANDS["resume"])

    p = sub.add_parser(
        "plan",
        help="validate, pre-flight and estimate launches and time, without running anything",
    )
    p.add_argument("space", help="search space YAML")
    p.add_argument("--db", help=db_help + "; its past launches give the time estimate")
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(fn=COMMANDS["plan"])

    p = sub.add_parser("jobs", help="list jobs")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=COMMANDS["jobs"])

    p = sub.add_parser("trials", help="list a job's trials and their metrics")
    p.add_argument("job_id", type=int)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help=json_help)
    fmt.add_argument("--csv", action="store_true", help="CSV on stdout, one row per trial")
    p.add_argument("--db", help=db_help)
    p.set_defaults(fn=COMMANDS["trials"])

    p = sub.add_parser("report", help="print a job's Pareto table, verdicts and winner again")
    p.add_argument("job", type=int)
    p.add_argument("--workload", help="workload name (default: the job's first)")
    p.add_argument("--concurrency", type=int, help="level (default: the objective level)")
    p.add_argument("--slo-p99-tpot-ms", type=float, help="re-evaluate under this SLO")
    p.add_argument("--db", help=db_help)
    p.add_argument("--json", action="store_true", help=json_help + " (as GET /api/jobs/ID/pareto)")
    p.set_defaults(fn=COMMANDS["report"])

    p = sub.add_parser("export", help="print the winning configuration")
    p.add_argument("job_id", type=int)
    p.add_argument("--format", default="vllm-json", choices=[f.name for f in EXPORT_FORMATS])
    p.add_argument("--workload", help="workload name (default: the job's first)")
    p.add_argument("--concurrency", type=int, help="level (default: the objective level)")
    p.add_argument("--slo-p99-tpot-ms", type=float, help="re-evaluate under this SLO")
    p.add_argument("--slo-p99-ttft-ms", type=float, help="re-evaluate under this SLO")
    p.add_argument("--db", help=db_help)
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(fn=COMMANDS["export"])

    p = sub.add_parser("validate", help="check a search-space YAML without running anything")
    p.add_argument("space")
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(fn=COMMANDS["validate"])

    p = sub.add_parser("db", help="database maintenance")
    p.add_argument("action", choices=["upgrade"])
    p.add_argument("--db", help=db_help)
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(fn=COMMANDS["db"])

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
    p.set_defaults(fn=COMMANDS["serve"])

    p = sub.add_parser("worker", help="run queued jobs (one at a time) without the API")
    p.add_argument("--db", help=db_help)
    p.add_argument("--work-dir", help="engine logs and caches (default .spectune)")
    p.add_argument("--once", action="store_true", help="run one queued job, then exit")
    p.add_argument(
        "--devices",
        help="accelerators this worker's engines use, e.g. 0,1 (engines see only these; "
        "recorded on each trial); workers on several hosts share one job",
    )
    p.set_defaults(fn=COMMANDS["worker"])
    add_token_parser(sub, db_help)
    add_watch_parser(sub, db_help)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "trials", None) is not None and args.trials < 1:
        err("--trials: must be at least 1")
        return EXIT_INPUT

    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the engine in flight is torn
    # down by its context manager instead of being orphaned.
    def _term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _term)
    try:
        return args.fn(args)
    except StorageError as e:
        err(str(e))
        return EXIT_FAIL
    except KeyboardInterrupt:
        err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
