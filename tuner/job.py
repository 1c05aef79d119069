"""A tuning job: create it, seed its study, run its trials, confirm the front, end it.

The no-speculation baseline is enqueued first, so every job measures the same target without
speculation on the same workload. Where the numbers come from (a launched engine, or a
recorded surface when benchmarking the search) is decided here, once per job.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from tuner.confirm import Confirmation
from tuner.context import (
    JobContext,
    JobHooks,
    MeasurerFactory,
    TrialEvent,
    WorkerContext,
    log_folder,
)
from tuner.engines import reap_stale
from tuner.hardware import hardware_fingerprint
from tuner.integrations import label_study, on_job_end, on_job_start, on_job_stopped
from tuner.measure import (
    JobCancelled,
    JobControl,
    LaunchMeasurer,
    Measurer,
    load_all_prompts,
    measure_references,
)
from tuner.pareto import Report, job_report
from tuner.recovery import Recovery, slots_used
from tuner.search import GUIDE_ATTR, Outlook, SearchStrategy
from tuner.space import SearchSpace
from tuner.states import JobState
from tuner.storage import JobModel, SpaceRefused, Store, space_of_job
from tuner.surface import ReplayMeasurer
from tuner.trial import TrialRunner
from tuner.workloads import Prompt, WorkloadError

__all__ = [
    "JobCancelled",
    "JobControl",
    "TrialEvent",
    "WorkerContext",
    "create_job",
    "default_measurer",
    "log_folder",
    "run_job",
]

log = logging.getLogger(__name__)


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
    try:
        label_study(store.load_study(job_id), space)  # optuna-dashboard's names, from the start
    except BaseException:
        store.delete_job(job_id)  # nothing kept half-way, as the store makes the pair
        raise
    return job_id


def default_measurer(ctx: JobContext, prompts: dict[str, list[Prompt]]) -> Measurer:
    """The product's ``MeasurerFactory``, chosen once per job: a recorded surface when the
    space names one, else real engines on this worker's devices."""
    if ctx.space.engine.surface is not None:
        return ReplayMeasurer(ctx.space, ctx.count_launch)
    return LaunchMeasurer(
        ctx.space, prompts, ctx.work_dir, ctx.control, ctx.count_launch, devices=ctx.worker.devices
    )


def _run_trials(
    ctx: JobContext,
    study: optuna.Study,
    runner: TrialRunner,
    recovery: Recovery,
    conf: Confirmation,
) -> tuple[str | None, bool]:
    """Search and confirmation as one loop; returns why the search stopped (the owner's),
    and whether it closed on its outlook (nothing could win), not at its cap.

    After every launch the owner reads the job's report and asks the strategy's outlook
    (``tuner.search._stop``) whether anything not launched yet can still beat the winner:
    while something can and the trial cap allows, the next search launch; once nothing
    predicted beats the winner's own value (only optimism is left), the baseline and the
    winner are confirmed first, whose tighter bound may end the search; when nothing can win
    or the cap is reached, the search closes (no worker takes another slot) and the
    confirmation launches finish the job. A worker helping the owner runs search trials
    while slots last; the owner waits for theirs, failing those of dead workers (whose
    retries it may run) and taking back the slots of workers that died before their trial
    began."""
    store, job_id, poll_s = ctx.store, ctx.job_id, ctx.worker.poll_s
    strategy = runner.strategy
    running = (optuna.trial.TrialState.RUNNING,)
    waiting = (optuna.trial.TrialState.WAITING,)
    stopped: str | None = None
    on_outlook = False  # the search closed because nothing could win (not at its cap)
    reopen = False  # ...and a confirmation launch ran since
    while True:
        if ctx.control.cancelled:
            raise JobCancelled("job cancelled")
        recovery.sweep(study)
        if not ctx.owner:
            if store.take_trial_slot(job_id):
                strategy.propose(study)
                recovery.run_one(study, runner)
                continue
            return None, False
        if recovery.tell_stored(study, runner):
            continue  # a lost trial's stored result told Optuna: no launch, no slot
        rep = job_report(store, job_id)
        strategy.keep_prices()
        # Enqueued trials (start points, warm starts, a recorded grid) were asked for: they
        # run before the outlook may close the search.
        queued = bool(study.get_trials(deepcopy=False, states=waiting))
        look = None if queued else strategy.outlook(rep)
        if look is not None and not look.can_win and not ctx.space.stop_early:
            look = None  # spend the whole budget: the guide proposes as if nothing was ruled out
        left = store.trial_slots_left(job_id)
        if left > 0 and stopped is None and (look is None or look.can_win):
            number = _confirm_first(rep, look, conf)
            if number is not None:
                conf.launch(number)
                continue
            if store.take_trial_slot(job_id):
                strategy.propose(study, look)
                recovery.run_one(study, runner)
                continue
        elif left > 0 and stopped is None and look is not None:
            stopped, on_outlook = look.reason(), True
            store.set_stop_reason(job_id, stopped)
        elif reopen and stopped is not None and look is not None and look.can_win:
            # A confirmation launch moved the winner or its bound (a lucky first launch
            # measured again), and what the search closed on no longer holds: search on.
            if store.reopen_search(job_id):
                stopped, on_outlook, reopen = None, False, False
                continue
        if store.trial_slots_left(job_id) > 0 and stopped is None:
            continue  # a dead worker's trial was put back: run it
        unasked = recovery.unasked_slots(study)  # a dead worker's slot, back after grace_s
        # Running trials before ``settle`` (which retries a lost trial's stored result, told
        # once): a trial failed as stale between the two reads is seen by the second (its
        # retry is waited for), never by neither.
        if unasked or study.get_trials(deepcopy=False, states=running) or recovery.settle(study):
            deadline = time.monotonic() + poll_s
            while time.monotonic() < deadline and not ctx.control.cancelled:
                time.sleep(min(0.2, poll_s))
            continue
        if stopped is None:
            stopped = _budget_reason(ctx, strategy.outlook(rep))
            store.set_stop_reason(job_id, stopped)
        number = conf.next(rep)
        if number is None:
            if (store.job_status(job_id) or ("", False))[1]:
                # A cancel requested before the end wins, even one the heartbeat has not
                # brought yet: a helper that saw it first has cut its trial short.
                raise JobCancelled("job cancelled")
            recovery.drop_retries(study, f"the search had closed: {stopped}")
            return stopped, on_outlook
        conf.launch(number)
        reopen = on_outlook


def _confirm_first(rep: Report, look: Outlook | None, conf: Confirmation) -> int | None:
    """The baseline or the winner to launch again before the next search launch, or None:
    only once nothing left is predicted (centrally) to beat the winner, so the tighter bound
    of a confirmed pair may end the search; never before enqueued trials have run."""
    w = rep.winner
    if look is None or w is None or w.metrics.get(look.metric) is None:
        return None
    if look.predicted_to_beat(float(w.metrics[look.metric])):
        return None
    number = conf.next(rep, reserve=1)  # one launch kept for a winner found later
    pair = {p.trial_number for p in (rep.baseline, w) if p is not None}
    return number if number in pair else None


def _final_reason(stopped: str | None, look: Outlook | None) -> str | None:
    """Why the search stopped, read again once confirmation is over: when nothing can win
    against the confirmed winner either, the reason names that winner and its bound over
    its launches (at the search's close it named the winner of then, launched once)."""
    if look is None or look.can_win:
        return stopped
    return look.reason()


def _budget_reason(ctx: JobContext, look: Outlook | None) -> str:
    """The search stopped at its trial cap: say so, and what could still have won."""
    n = ctx.n_trials
    head = f"trial budget spent: {n} of {n} search trials"
    if look is None:
        return f"{head} (search: {ctx.space.search})"
    return f"{head}; {look.reason()}"


def _end(ctx: JobContext, state: JobState, error: str | None) -> None:
    """End the job, then tell the integrations (MLflow's parent run ends with it: FINISHED
    with the winner's exports, or KILLED/FAILED). Only the job's owner ends it: a helper
    leaving changes nothing."""
    if not ctx.owner:
        return
    ctx.store.end_job(ctx.job_id, state, error)
    if state == JobState.SUCCEEDED:
        on_job_end(ctx.store, ctx.job_id)
    else:
        on_job_stopped(ctx.store, ctx.job_id, state)


def _set_up(
    ctx: JobContext, prompts: dict[str, list[Prompt]], measurers: MeasurerFactory | None
) -> tuple[optuna.Study, Recovery, TrialRunner]:
    """The study, its recovery and the trial runner of one worker's part in a job; the
    owner also seeds the start points and syncs the budget's slots."""
    store, job_id, space, worker = ctx.store, ctx.job_id, ctx.space, ctx.worker
    # Another seed per helper: two samplers with one seed and one history propose the same
    # point; the constant liar keeps each away from what the others are running. Kept in
    # NumPy's seed range (0 to 2**32-1): past it, the sampler refuses the seed.
    seed = space.seed
    if not ctx.owner:
        seed = (seed + 1 + zlib.crc32(str(worker.worker_id).encode())) % 2**32
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, constant_liar=True)
    recovery = Recovery(ctx, reap=lambda: reap_stale(ctx.work_dir / "run"))
    study = store.load_study(job_id, sampler=sampler, storage=recovery.storage)
    strategy = SearchStrategy(ctx, prompts)
    if ctx.owner:
        recovery.sweep(study)
        if not study.trials:
            for params, skip in strategy.initial_params():
                note = {GUIDE_ATTR: {"by": "start"}}
                study.enqueue_trial(params, skip_if_exists=skip, user_attrs=note)
        store.sync_trial_slots(job_id, slots_used(study))
    measurer = (measurers or default_measurer)(ctx, prompts)
    measurer.prepare()  # the job's hub models fetched before any launch or trial clock
    if space.hosted and measurer.live and ctx.owner:
        measure_references(store, job_id, space, prompts)
    runner = TrialRunner(ctx, measurer, strategy)
    return study, recovery, runner


def run_job(
    store: Store,
    job_id: int,
    *,
    work_dir: Path | None = None,
    on_trial: Callable[[TrialEvent], None] | None = None,
    on_start: Callable[[int, dict[str, Any]], None] | None = None,
    control: JobControl | None = None,
    worker: WorkerContext | None = None,
    join: bool = False,
    measurers: MeasurerFactory | None = None,
) -> JobModel:
    """Run a job to the end of its trial budget; returns the job row.

    ``control`` lets another thread cancel the job. ``measurers`` makes the job's measurer
    (None: ``default_measurer``, the product's; tests inject one that launches the FAKE
    server). A job found ``running`` (its worker died) resumes: finished trials are kept,
    the lost one is retried. With ``join`` this worker only helps the job's owner: it runs
    trials while the shared budget lasts and leaves seeding, confirmation and the job's end
    to the owner.
    """
    store.ensure_schema()
    worker = worker or WorkerContext()
    job = store.job(job_id) if join else store.start_job(job_id)
    try:
        job_space = space_of_job(job)
    except SpaceRefused as e:  # stored by an older version: no worker of this one may run it
        if store.end_refused(job_id, e.reason):
            on_job_stopped(store, job_id, JobState.FAILED)
        raise
    ctx = JobContext(
        store,
        job_id,
        job_space,
        job.n_trials,
        (work_dir or Path(".spectune")).resolve(),
        control or JobControl(),
        worker,
        JobHooks(on_trial=on_trial, on_start=on_start),
        owner=not join,
    )
    space = ctx.space
    try:
        prompts = load_all_prompts(space)
    except WorkloadError as e:
        _end(ctx, JobState.FAILED, str(e))
        raise
    try:
        study, recovery, runner = _set_up(ctx, prompts, measurers)
    except JobCancelled:
        raise  # a stopping worker puts the job back (``Worker._release``)
    except Exception as e:  # left running with no owner, the job would wait for ever
        _end(ctx, JobState.FAILED, f"{type(e).__name__}: {e}")
        raise
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        on_job_start(study, space)  # names objectives of older studies too; MLflow ready
        conf = Confirmation(ctx, runner.measurer)
        stopped, on_outlook = _run_trials(ctx, study, runner, recovery, conf)
        if not ctx.owner:
            return store.job(job_id)
        final = job_report(store, job_id)
        if on_outlook:
            stopped = _final_reason(stopped, runner.strategy.outlook(final))
        outcome = conf.outcome(final)
        store.set_stop_reason(job_id, f"{stopped}; {outcome}" if stopped else outcome)
    except JobCancelled:
        status = store.job_status(job_id)
        if worker.stopping() and not (status and status[1]):
            recovery.requeue(study, runner.interrupted)  # the worker puts the job back
        else:
            _end(ctx, JobState.CANCELLED, "cancelled")
        return store.job(job_id)
    except KeyboardInterrupt:
        _end(ctx, JobState.CANCELLED, "interrupted by the user")
        raise
    except Exception as e:
        _end(ctx, JobState.FAILED, f"{type(e).__name__}: {e}")
        raise
    _end(ctx, JobState.SUCCEEDED, None)
    return store.job(job_id)
