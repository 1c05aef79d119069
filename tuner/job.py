"""A tuning job: create it, seed its study, run its trials, confirm the front, end it.

The no-speculation baseline is enqueued first, so every job measures the same target without
speculation on the same workload. Where the numbers come from (a launched engine, or a
recorded surface when benchmarking the search) is decided here, once per job.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.engine import make_url

from tuner.engines import EngineConfig
from tuner.hardware import hardware_fingerprint
from tuner.integrations import label_study, on_job_end, on_job_start, on_job_stopped
from tuner.measure import (
    JobCancelled,
    JobControl,
    LaunchMeasurer,
    Measurer,
    TrialFailed,
    load_all_prompts,
    measure_references,
)
from tuner.pareto import job_report, score
from tuner.search import GUIDE_ATTR, SearchStrategy
from tuner.space import SearchSpace
from tuner.storage import JobModel, Store, space_of_job
from tuner.surface import ReplayMeasurer
from tuner.trial import Recovery, TrialEvent, TrialRunner, run_one
from tuner.workloads import Prompt, WorkloadError

__all__ = [
    "JobCancelled",
    "JobControl",
    "TrialEvent",
    "WorkerContext",
    "create_job",
    "log_folder",
    "run_job",
]

log = logging.getLogger(__name__)

# What a confirmation keeps of the search's own numbers, under ``search``.
_SEARCH_KEYS = (
    "output_tok_per_s",
    "p99_tpot_ms",
    "mean_tpot_ms",
    "p99_ttft_ms",
    "acceptance_rate",
    "stats",
    "score",
    "noisy",
    "relative_mad",
)


def log_folder(url: str, job_id: int) -> str:
    """Job ids restart in every database: the folder names the database too, so two
    databases sharing a work folder never overwrite each other's engine logs."""
    try:
        u = make_url(url)
        name = Path(u.database).stem if u.get_backend_name() == "sqlite" and u.database else ""
    except Exception:
        name = ""
    tag = hashlib.sha256(url.encode()).hexdigest()[:6]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40]
    return f"{safe}-{tag}-job-{job_id}" if safe else f"{tag}-job-{job_id}"


def create_job(
    store: Store, space: SearchSpace, *, space_yaml: str | None = None, n_trials: int | None = None
) -> int:
    """Store a queued job and its Optuna study; returns the job id."""
    load_all_prompts(space)  # refuse a bad workload now, not after the first launch
    data = space.model_dump(mode="json")
    data["base_dir"] = str(space.base_dir)
    data["hardware"] = hardware_fingerprint(space.engine.device)
    job_id = store.create_job(
        space, data, space_yaml=space_yaml, n_trials=n_trials or space.trials
    )
    label_study(store.load_study(job_id), space)  # optuna-dashboard's names, from the start
    return job_id


def _confirm(
    store: Store,
    job_id: int,
    space: SearchSpace,
    measurer: Measurer,
    *,
    log_dir: Path,
    n_trials: int,
    control: JobControl,
    on_trial: Callable[[TrialEvent], None] | None,
    on_start: Callable[[int, dict[str, Any]], None] | None,
) -> list[int]:
    """Re-launch the best front configurations (and the baseline) and measure them again;
    their stored numbers become the confirmed ones, the search's are kept under ``search``.
    Returns the confirmed trial numbers."""
    k = space.measurement.confirm_top
    if k <= 0 or not measurer.live:
        return []  # a replay has nothing to re-launch
    rep = job_report(store, job_id)
    name, direction = rep.objectives[0]
    sign = -1.0 if direction == "maximize" else 1.0
    ranked = sorted(
        (p for p in rep.front if p.method != "none"), key=lambda p: sign * score(p, name)
    )
    chosen = [p.trial_number for p in ranked[:k]]
    if not chosen:
        return []
    if rep.baseline is not None:
        chosen.append(rep.baseline.trial_number)

    def keep(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        return {**new, "confirmed": True, "search": {key: old.get(key) for key in _SEARCH_KEYS}}

    done = []
    for number in chosen:
        if control.cancelled:
            break
        row = store.trial(job_id, number)
        cfg = EngineConfig.from_dict(row.engine_config)
        if on_start:
            on_start(number, {"confirm": True, **row.params})
        t0 = time.monotonic()
        try:
            ms, _ = measurer.measure(
                cfg, row.params, log_dir / f"confirm-{number}.log", confirm=True
            )
        except TrialFailed as e:
            log.warning("confirmation of trial %s failed: %s", number, e)
            continue
        new = {(m["workload"], m["concurrency"]): m for m in ms}
        store.replace_measurements(job_id, number, new, keep)
        done.append(number)
        if on_trial:
            m = new.get((space.primary_workload, space.primary_concurrency), {})
            summary = (
                f"{m.get('output_tok_per_s', 0):.1f} tok/s, p99 TPOT "
                f"{m.get('p99_tpot_ms') or float('nan'):.2f} ms"
            )
            seconds = time.monotonic() - t0
            on_trial(
                TrialEvent(number, n_trials, "confirmed", row.method, row.params, seconds, summary)
            )
    return done


def _measurer(
    store: Store,
    job_id: int,
    space: SearchSpace,
    prompts: dict[str, list[Prompt]],
    work_dir: Path,
    control: JobControl,
    launcher: list[str] | None,
    devices: str | None,
) -> Measurer:
    """Chosen once per job: a recorded surface when the space names one, else real engines."""

    def on_launch(startup_s: float, confirm: bool) -> None:
        store.count_launch(job_id, startup_s, confirm=confirm)

    if space.engine.surface is not None:
        return ReplayMeasurer(space, on_launch)
    return LaunchMeasurer(space, prompts, work_dir, control, on_launch, launcher, devices)


@dataclass(frozen=True)
class WorkerContext:
    """The worker running a job's trials, one of possibly several sharing the job (Optuna's
    distributed mode: each process asks the same study in the same database).

    ``heartbeat_s``/``grace_s``: each running trial beats; one silent for ``grace_s`` is
    failed by any worker and retried once. ``stopping``: true when the worker was asked to
    stop (its trial in flight is then put back, not cancelled)."""

    worker_id: str | None = None
    devices: str | None = None
    heartbeat_s: float = 5.0
    grace_s: float = 60.0
    poll_s: float = 2.0
    stopping: Callable[[], bool] = field(default=lambda: False)


def _slots_used(study: optuna.Study) -> int:
    """Trials a job stored before shared budgets already ran: each retry stands in for the
    trial it repeats, so the two take one slot."""
    trials = study.get_trials(deepcopy=False)
    ran = sum(1 for t in trials if t.state != optuna.trial.TrialState.WAITING)
    return ran - sum(1 for t in trials if "failed_trial" in t.system_attrs)


def _run_trials(
    store: Store,
    job_id: int,
    study: optuna.Study,
    runner: TrialRunner,
    recovery: Recovery,
    control: JobControl,
    *,
    owner: bool,
    poll_s: float,
) -> None:
    """Take a slot of the shared budget, run one trial, until the budget is spent. The
    owner then waits for the other workers' trials (failing those of dead workers, whose
    retries it may run), so the job ends once every trial has."""
    running = (optuna.trial.TrialState.RUNNING,)
    while True:
        if control.cancelled:
            raise JobCancelled("job cancelled")
        if store.take_trial_slot(job_id):
            recovery.sweep(study)
            runner.strategy.propose(study)
            run_one(study, runner)
            continue
        if not owner:
            return
        recovery.sweep(study)
        if store.trial_slots_left(job_id) > 0:
            continue  # a dead worker's trial was put back: run it
        if not study.get_trials(deepcopy=False, states=running):
            return
        deadline = time.monotonic() + poll_s
        while time.monotonic() < deadline and not control.cancelled:
            time.sleep(min(0.2, poll_s))


def run_job(
    store: Store,
    job_id: int,
    *,
    work_dir: Path | None = None,
    on_trial: Callable[[TrialEvent], None] | None = None,
    on_start: Callable[[int, dict[str, Any]], None] | None = None,
    launcher: list[str] | None = None,
    control: JobControl | None = None,
    worker: WorkerContext | None = None,
    join: bool = False,
) -> JobModel:
    """Run a job to the end of its trial budget; returns the job row.

    ``control`` lets another thread cancel the job. ``launcher`` (tests only) replaces the
    engine's ``python -m …`` prefix. A job found ``running`` (its worker died) resumes:
    finished trials are kept, the lost one is retried. With ``join`` this worker only helps
    the job's owner: it runs trials while the shared budget lasts and leaves seeding,
    confirmation and the job's end to the owner.
    """
    store.ensure_schema()
    ctx = worker or WorkerContext()
    job = store.job(job_id) if join else store.start_job(job_id)
    space, n_trials = space_of_job(job), job.n_trials
    work_dir = (work_dir or Path(".spectune")).resolve()
    control = control or JobControl()
    try:
        prompts = load_all_prompts(space)
    except WorkloadError as e:
        if not join:
            store.end_job(job_id, "failed", str(e))
            on_job_stopped(store, job_id, "failed")
        raise
    # Another seed per helper: two samplers with one seed and one history propose the same
    # point; the constant liar keeps each away from what the others are running.
    seed = space.seed if not join else space.seed + 1 + zlib.crc32(str(ctx.worker_id).encode())
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, constant_liar=True)
    recovery = Recovery(store, job_id, ctx.grace_s)
    storage = store.optuna_storage(
        heartbeat_s=ctx.heartbeat_s, grace_s=ctx.grace_s, on_stale=recovery.on_stale
    )
    recovery.storage = storage
    study = store.load_study(job_id, sampler=sampler, storage=storage)
    strategy = SearchStrategy(store, job_id, space, n_trials, prompts)
    if not join:
        recovery.sweep(study)
        if not study.trials:
            for params, skip in strategy.initial_params():
                note = {GUIDE_ATTR: {"by": "start"}}
                study.enqueue_trial(params, skip_if_exists=skip, user_attrs=note)
        store.sync_trial_slots(job_id, _slots_used(study))
    measurer = _measurer(store, job_id, space, prompts, work_dir, control, launcher, ctx.devices)
    if space.hosted and measurer.live and not join:
        measure_references(store, job_id, space, prompts)
    log_dir = work_dir / "logs" / log_folder(store.url, job_id)
    hooks: dict[str, Any] = dict(
        log_dir=log_dir, n_trials=n_trials, control=control, on_trial=on_trial, on_start=on_start
    )
    runner = TrialRunner(
        store,
        job_id,
        space,
        measurer,
        strategy,
        **hooks,
        worker_id=ctx.worker_id,
        devices=ctx.devices,
        stopping=ctx.stopping,
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        on_job_start(study, space)  # names objectives of older studies too; MLflow ready
        _run_trials(
            store, job_id, study, runner, recovery, control, owner=not join, poll_s=ctx.poll_s
        )
        if join:
            return store.job(job_id)
        _confirm(store, job_id, space, measurer, **hooks)
    except JobCancelled:
        status = store.job_status(job_id)
        if ctx.stopping() and not (status and status[1]):
            recovery.requeue(study, runner.interrupted)  # the worker puts the job back
        elif not join:
            store.end_job(job_id, "cancelled", "cancelled")
            on_job_stopped(store, job_id, "cancelled")
        return store.job(job_id)
    except KeyboardInterrupt:
        if not join:
            store.end_job(job_id, "cancelled", "interrupted by the user")
            on_job_stopped(store, job_id, "cancelled")
        raise
    except Exception as e:
        if not join:
            store.end_job(job_id, "failed", f"{type(e).__name__}: {e}")
            on_job_stopped(store, job_id, "failed")
        raise
    store.end_job(job_id, "succeeded", None)
    on_job_end(store, job_id)
    return store.job(job_id)
