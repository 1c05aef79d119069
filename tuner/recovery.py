"""What survives a dead worker: each running trial beats, and a trial whose worker is gone is
failed (``interrupted``) and run again (``MAX_RETRY`` times at most) by whichever worker
takes the next slot.

Apart from the objective (``tuner.trial``) as Optuna keeps ``_run_trial`` apart from the
study: ``run_one`` is one trial as ``study.optimize`` runs it (ask, beat, tell), told with
``skip_if_finished`` so a trial another worker declared lost meanwhile stays failed instead
of failing the job.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback

from tuner.context import JobContext
from tuner.measure import Measured, TrialFailed, objective_values
from tuner.space import SpaceError
from tuner.states import TrialState
from tuner.storage import (
    ResilientRDBStorage,
    Store,
    job_id_of_study,
    retried_number,
    study_name_for,
)

__all__ = [
    "MAX_RETRY",
    "NOT_RUN_ATTR",
    "EndedJobSweep",
    "Recovery",
    "slots_used",
    "trial_heartbeat",
]

# Runs of a lost trial after the first: a worker's death is not the trial's fault, so one
# retry lost again runs again. At the soak's fault rate (a kill or stall every ~20 s, trials
# of ~1 s) a retry is lost again about twice an hour, and with one retry that trial was lost;
# a configuration that takes its worker down every time stops after three.
MAX_RETRY = 3
# Optuna system attribute of a trial the job did not run, saying why: a retry after the
# search closed, or a helper's trial asked after the job ended.
NOT_RUN_ATTR = "spectune_not_run"
_STORED = (TrialState.COMPLETE, TrialState.PRUNED)
_LOST_UNRETRIED = "its worker stopped, and whoever declared it lost did not queue its retry"
_ENDED_WHILE_RUNNING = "its job ended while it ran, and its worker stopped (killed, or cut off)"

Objective = Callable[[optuna.Trial], list[float]]

log = logging.getLogger(__name__)


def slots_used(study: optuna.Study) -> int:
    """Slots of the budget the study's trials account for: each asked trial one, but a
    retry stands in for the trial it repeats (whose slot was given back), so the two take
    one. Also what a job stored before shared budgets already ran."""
    trials = study.get_trials(deepcopy=False)
    ran = sum(1 for t in trials if t.state != optuna.trial.TrialState.WAITING)
    return ran - sum(1 for t in trials if retried_number(t) is not None)


@contextmanager
def trial_heartbeat(storage: optuna.storages.BaseStorage, trial_id: int) -> Iterator[None]:
    """The running trial's heartbeat in Optuna's table, every ``heartbeat_interval``, while
    the block runs: what lets the other workers tell a trial whose worker died from a slow
    one. A storage without heartbeats beats nothing."""
    record = getattr(storage, "record_heartbeat", None)
    interval = getattr(storage, "get_heartbeat_interval", None)
    every_s = interval() if interval is not None else None
    done = threading.Event()

    def beat() -> None:
        while True:
            record(trial_id)  # type: ignore[misc]
            if done.wait(every_s):
                return

    thread = threading.Thread(target=beat, name=f"spectune-trial-beat-{trial_id}", daemon=True)
    if record is not None and every_s:
        thread.start()
    try:
        yield
    finally:
        done.set()
        if thread.is_alive():
            thread.join(timeout=10)


def _tell(
    study: optuna.Study,
    trial: optuna.Trial,
    values: list[float] | None,
    state: optuna.trial.TrialState | None,
) -> None:
    """``study.tell`` with ``skip_if_finished``, including a trial finished between Optuna's
    check and its write (soak job 956: declared lost while its worker stalled, the tell
    retried through a database restart found it failed and the job failed). The trial
    stays as the other worker left it: its retry measures it, or tells a stored result."""
    try:
        study.tell(trial, values, state=state, skip_if_finished=True)
    except optuna.exceptions.UpdateFinishedTrialError:
        log.warning("trial %s was finished elsewhere before its tell: left so", trial.number)


class Recovery:
    """What becomes of a trial whose worker is gone: failed (``interrupted``) and, when it
    has no stored result, run again by whichever worker takes the next slot. Its slot
    goes back to the budget, so a crash costs time, never a trial; a stored result is never
    measured twice.

    Makes the job's Optuna storage (``storage``, to load the study on): its heartbeat settings
    are the worker's, and its stale-trial callback is this recovery's ``on_stale``. ``reap``
    stops the engines that dead workers left on this host (``tuner.engines.reap_stale``):
    each sweep calls it, so a dead worker's engine never holds the device beside the next
    launch until a worker restarts."""

    def __init__(self, ctx: JobContext, *, reap: Callable[[], list[int]] | None = None) -> None:
        self.ctx, self.reap = ctx, reap
        self.storage = ctx.store.optuna_storage(
            heartbeat_s=ctx.worker.heartbeat_s, grace_s=ctx.worker.grace_s, on_stale=self.on_stale
        )
        self._unasked: tuple[tuple[int, int], float] | None = None  # (taken, used), seen at
        self._settled: set[int] = set()  # failed trials whose lost result is settled
        self._unsettled: dict[int, float] = {}  # failed in Optuna, row still running: seen at

    def run_one(self, study: optuna.Study, objective: Objective) -> None:
        """One trial as ``study.optimize`` runs it (ask, heartbeat while it runs, tell), but
        told with ``skip_if_finished``. ``TrialFailed`` and pruning end the trial, not the
        job; anything else fails the trial and goes on up."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
            trial = study.ask()  # what optimize would do, heartbeat included (below)
        self._run(study, trial, objective)

    def tell_stored(self, study: optuna.Study, objective: Objective) -> bool:
        """The owner runs a queued retry of a trial whose result is stored, at once: it only
        tells Optuna those values (``TrialRunner._reuse``, no launch, no slot). ``ask`` would
        take the oldest waiting trial instead, and one that launches (an enqueued neighbour)
        may wait ahead of it, or the search may have closed (soak job 152: the result was
        never told). False: none waits."""
        for t, stored in self._waiting_retries(study):
            if stored and self._claim(t):
                self._run(study, optuna.Trial(study, t._trial_id), objective)
                return True
        return False

    def drop_retries(self, study: optuna.Study, why: str) -> list[int]:
        """At the job's end, the retries still queued that would launch: the search closed
        on its outlook (nothing left can win, the lost trial's configuration included), so
        none runs. Each is failed in Optuna with ``why`` under ``NOT_RUN_ATTR``, so the
        record says what became of its lost trial instead of leaving it waiting. A stored
        result's retry launches nothing and is never dropped (``tell_stored`` tells it).
        Their numbers."""
        dropped = []
        for t, stored in self._waiting_retries(study):
            if stored or not self._claim(t):
                continue
            self.storage.set_trial_system_attr(t._trial_id, NOT_RUN_ATTR, why)
            self.storage.set_trial_state_values(t._trial_id, state=optuna.trial.TrialState.FAIL)
            dropped.append(t.number)
        if dropped:
            log.warning("job %s: retries %s not run: %s", self.ctx.job_id, dropped, why)
        return dropped

    def _waiting_retries(
        self, study: optuna.Study
    ) -> Iterator[tuple[optuna.trial.FrozenTrial, bool]]:
        """Each queued retry of a lost trial, and whether that trial's result is stored."""
        store, job_id = self.ctx.store, self.ctx.job_id
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            history = t.system_attrs.get("retry_history") or []
            if history:
                yield t, store.trial_state(job_id, history[-1]) in _STORED

    def _claim(self, t: optuna.trial.FrozenTrial) -> bool:
        """Waiting to running, as ``ask`` claims a waiting trial: one claimer wins."""
        running = optuna.trial.TrialState.RUNNING
        try:
            return self.storage.set_trial_state_values(t._trial_id, state=running)
        except optuna.exceptions.UpdateFinishedTrialError:
            return False

    def _run(self, study: optuna.Study, trial: optuna.Trial, objective: Objective) -> None:
        values: list[float] | None = None
        state: optuna.trial.TrialState | None = None
        try:
            # ``_trial_id`` (the storage's id, not the study's number) is what a heartbeat
            # row is keyed by; Optuna exposes no public accessor. ``self.storage`` is the
            # storage the study was loaded on (Optuna wraps it in a cache that forwards
            # heartbeats to it), so nothing reaches into ``study._storage``.
            with trial_heartbeat(self.storage, trial._trial_id):
                values = objective(trial)
        except optuna.TrialPruned:
            state = optuna.trial.TrialState.PRUNED
        except TrialFailed:
            state = optuna.trial.TrialState.FAIL
        except BaseException:
            _tell(study, trial, None, optuna.trial.TrialState.FAIL)
            raise
        _tell(study, trial, values, state)

    def on_stale(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna's ``heartbeat_stale_trial_callback``: the trial is already failed there."""
        self._retry(study, trial, "its worker stopped beating (killed, or cut off)")

    def _retry(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial, why: str, *, row: bool = True
    ) -> bool:
        store, job_id = self.ctx.store, self.ctx.job_id
        store.fail_orphaned_trials(job_id, [trial.number], detail=why)
        # Read once, after the row was failed (it locks the row), so no result lands later.
        state, reason = (row and store.trial_outcome(job_id, trial.number)) or (None, None)
        if state == TrialState.FAIL and reason != "interrupted":
            return False  # its own failure is stored, as Optuna now says: run nothing again
        if state in _STORED and not self.ctx.owner:
            # Its worker stored the result before it stopped: the job's owner alone tells
            # Optuna, so it is told once (``settle``), whoever declared the trial lost.
            return False
        if any(retried_number(t) == trial.number for t in study.get_trials(deepcopy=False)):
            # Queued meanwhile (the owner's ``settle`` after ``grace_s``, while this worker
            # stalled between Optuna's failing the trial and this callback): not twice.
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            history = RetryHeartbeatStaleTrialCallback.retry_history(trial)
            if len(history) >= MAX_RETRY:
                return False
            RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)(study, trial)
        if state not in _STORED:  # a stored result is told with no slot (``tell_stored``)
            store.refund_trial_slot(job_id)
        return True

    def settle(self, study: optuna.Study) -> bool:
        """The owner's part in a lost trial, whoever declared it lost. Optuna fails a stale
        trial before its callback queues the retry, and the owner could end the job in
        between (the retry would never run), or the worker running the callback could die
        there: so the owner reads every trial Optuna failed that nothing retried. A stored
        result (its worker stopped between storing it and telling Optuna) is retried at
        once: the retry finds it (``TrialRunner._reuse``) and tells Optuna its values with
        no launch, once. A trial with no row, a running row or an ``interrupted`` one may
        be mid-callback elsewhere: True (the owner does not end the job) until its retry
        shows, or ``grace_s`` passes and the owner retries it itself. Any other failure is
        the trial's own, stored as such."""
        fail = optuna.trial.TrialState.FAIL
        trials = study.get_trials(deepcopy=False)
        retried = {retried_number(t) for t in trials}
        store, job_id, now = self.ctx.store, self.ctx.job_id, time.monotonic()
        unsettled = False
        for t in trials:
            if t.state != fail or t.number in retried or t.number in self._settled:
                continue
            if len(t.system_attrs.get("retry_history") or []) >= MAX_RETRY:
                self._settled.add(t.number)  # lost at every run: it stays failed and counts
                continue
            outcome = store.trial_outcome(job_id, t.number)
            state, reason = outcome if outcome is not None else (None, None)
            if state in _STORED:
                self._settled.add(t.number)
                # queued: True, so the owner loops once more and tells it (``tell_stored``)
                unsettled |= self._retry(study, t, "its worker stopped before telling Optuna")
                continue
            if state == TrialState.FAIL and reason != "interrupted":
                self._settled.add(t.number)  # the trial's own failure
                continue
            seen = self._unsettled.setdefault(t.number, now)
            if now - seen < self.ctx.worker.grace_s:
                unsettled = True
                continue
            self._settled.add(t.number)
            self._unsettled.pop(t.number, None)
            store.fail_orphaned_trials(job_id, [t.number], detail=_LOST_UNRETRIED)
            self._retry(study, t, _LOST_UNRETRIED, row=False)
        return unsettled

    def requeue(self, study: optuna.Study, numbers: list[int]) -> None:
        """Trials this worker cut short when asked to stop run again elsewhere."""
        trials = study.get_trials(deepcopy=False)
        for n in numbers:
            if n < len(trials) and trials[n].state == optuna.trial.TrialState.FAIL:
                self._retry(study, trials[n], "its worker was stopped", row=False)

    def sweep(self, study: optuna.Study) -> None:
        """Fail the trials of dead workers: those whose heartbeat went stale (Optuna's
        check, which calls ``on_stale``) and those that never beat at all; then stop the
        engines dead workers left on this host."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        self._fail_unbeaten(study)
        for pgid in self.reap() if self.reap is not None else []:
            log.warning("stopped engine process group %s left by a dead worker", pgid)

    def unasked_slots(self, study: optuna.Study) -> bool:
        """True while more slots of the budget are taken than trials account for: a worker
        is between ``take_trial_slot`` and ``ask`` (a moment), or died there, and then its
        slot would be lost (the job would measure one trial fewer than its budget). Seen
        unchanged for ``grace_s`` (the time a dead worker's trial takes to be declared
        lost), the missing slots go back to the budget."""
        store, job_id = self.ctx.store, self.ctx.job_id
        # Slots first: a slot taken and asked between the two reads shows as no gap.
        taken, used = store.trial_slots_taken(job_id), slots_used(study)
        if taken <= used:
            self._unasked = None
            return False
        now = time.monotonic()
        if self._unasked is None or self._unasked[0] != (taken, used):
            self._unasked = ((taken, used), now)
        elif now - self._unasked[1] >= self.ctx.worker.grace_s:
            if store.give_back_trial_slots(job_id, taken=taken, used=used):
                log.warning(
                    "job %s: %d slot(s) taken by a worker that died before its trial began "
                    "went back to the budget",
                    job_id,
                    taken - used,
                )
            self._unasked = None
        return True

    def _fail_unbeaten(self, study: optuna.Study) -> None:
        storage = self.storage
        find = getattr(storage, "unbeaten_trial_ids", None)
        if find is None:
            return
        fail = optuna.trial.TrialState.FAIL
        for tid in find(storage.get_study_id_from_name(study.study_name), self.ctx.worker.grace_s):
            try:
                if storage.set_trial_state_values(tid, state=fail):
                    self._retry(study, storage.get_trial(tid), "its worker never beat")
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # another worker got there first


class EndedJobSweep:
    """Trials left running in jobs that have ended: a worker killed or stalled after its
    job's owner ended the job (a cancel, a failure) leaves its trial running in Optuna and
    in SpecTune, and no job loop sweeps an ended job. An idle worker fails them
    (``interrupted``), or tells Optuna a result already stored, at most once per
    ``every_s``: its first read is one query."""

    def __init__(self, store: Store, *, grace_s: float, every_s: float | None = None) -> None:
        self.store, self.grace_s = store, grace_s
        self.every_s = grace_s if every_s is None else every_s
        self._storage: ResilientRDBStorage | None = None
        self._last = -float("inf")

    def __call__(self) -> list[int]:
        """The jobs whose trials it failed."""
        now = time.monotonic()
        if now - self._last < self.every_s:
            return []
        self._last = now
        if self._storage is None:
            self._storage = self.store.optuna_storage()
        storage = self._storage
        running = {job_id_of_study(name) for name in storage.running_study_names()} - {None}
        jobs = self.store.abandoned_jobs(running, ended_before_s=self.grace_s)
        fail = optuna.trial.TrialState.FAIL
        for job_id in jobs:
            study_id = storage.get_study_id_from_name(study_name_for(job_id))
            for t in storage.get_all_trials(
                study_id, deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
            ):
                state, values = self._stored(job_id, t.number) or (fail, None)
                try:
                    storage.set_trial_state_values(t._trial_id, state, values)
                except optuna.exceptions.UpdateFinishedTrialError:
                    pass  # its worker came back and ended it meanwhile
            self.store.fail_orphaned_trials(job_id, detail=_ENDED_WHILE_RUNNING)
            log.warning("job %s: trials left running after the job ended were failed", job_id)
        return jobs

    def _stored(
        self, job_id: int, number: int
    ) -> tuple[optuna.trial.TrialState, list[float] | None] | None:
        """Optuna's state and values for a trial whose worker stored its result and then
        stopped before telling Optuna, after its job had ended (soak jobs 613 and 1018, both
        cancelled: failing it left Optuna FAIL beside a stored result, and no retry runs in
        an ended job). None: nothing stored, so it fails."""
        outcome = self.store.trial_outcome(job_id, number)
        if outcome is None or outcome[0] not in _STORED:
            return None
        if outcome[0] == TrialState.PRUNED:
            return optuna.trial.TrialState.PRUNED, None
        try:
            space = self.store.space(job_id)
            points = [dict(m.metrics) for m in self.store.trial(job_id, number).measurements]
            values = objective_values(Measured(points).primary(space), space)
        except (SpaceError, StopIteration, TrialFailed):
            return None  # unreadable today: failed, and its row still says what it measured
        return optuna.trial.TrialState.COMPLETE, values
