"""What survives a dead worker: each running trial beats, and a trial whose worker is gone is
failed (``interrupted``) and run once more by whichever worker takes the next slot.

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
from tuner.measure import TrialFailed
from tuner.states import TrialState

__all__ = ["MAX_RETRY", "Recovery", "slots_used", "trial_heartbeat"]

MAX_RETRY = 1  # a lost trial runs once more; lost again, it stays failed and counts
_STORED = (TrialState.COMPLETE, TrialState.PRUNED)

Objective = Callable[[optuna.Trial], list[float]]

log = logging.getLogger(__name__)


def slots_used(study: optuna.Study) -> int:
    """Slots of the budget the study's trials account for: each asked trial one, but a
    retry stands in for the trial it repeats (whose slot was given back), so the two take
    one. Also what a job stored before shared budgets already ran."""
    trials = study.get_trials(deepcopy=False)
    ran = sum(1 for t in trials if t.state != optuna.trial.TrialState.WAITING)
    return ran - sum(1 for t in trials if "failed_trial" in t.system_attrs)


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


class Recovery:
    """What becomes of a trial whose worker is gone: failed (``interrupted``) and, when it
    has no stored result, run once more by whichever worker takes the next slot. Its slot
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
            study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            raise
        study.tell(trial, values, state=state, skip_if_finished=True)

    def on_stale(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna's ``heartbeat_stale_trial_callback``: the trial is already failed there."""
        self._retry(study, trial, "its worker stopped beating (killed, or cut off)")

    def _retry(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial, why: str, *, row: bool = True
    ) -> bool:
        store, job_id = self.ctx.store, self.ctx.job_id
        if row and store.trial_state(job_id, trial.number) == TrialState.FAIL:
            return False  # its failure is stored, as Optuna now says: run nothing again
        store.fail_orphaned_trials(job_id, [trial.number], detail=why)
        if row and store.trial_state(job_id, trial.number) in _STORED and not self.ctx.owner:
            # Its worker stored the result before it stopped (read after the row was
            # failed, so no result lands later): the job's owner alone tells Optuna, so it
            # is told once (``settle``), whoever declared the trial lost.
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            history = RetryHeartbeatStaleTrialCallback.retry_history(trial)
            if len(history) >= MAX_RETRY:
                return False
            RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)(study, trial)
        store.refund_trial_slot(job_id)
        return True

    def settle(self, study: optuna.Study) -> bool:
        """The owner's part in a lost trial: a stored result (its worker stopped between
        storing it and telling Optuna) is retried, and the retry finds it
        (``TrialRunner._reuse``) and tells Optuna its values with no launch, so the sampler
        learns what was measured, once. Optuna fails a stale trial before its callback queues
        the retry, and a worker may die between the two: so the owner reads every trial
        Optuna failed that nothing retried, whoever failed it, and settles it itself. True
        while one is unsettled (its row still running: the worker that declared it lost is
        failing it, or died doing so, which the owner takes over after ``grace_s``); the
        owner does not end the job before."""
        fail = optuna.trial.TrialState.FAIL
        trials = study.get_trials(deepcopy=False)
        retried = {t.system_attrs.get("failed_trial") for t in trials}
        open_ = [
            t
            for t in trials
            if t.state == fail and t.number not in retried and t.number not in self._settled
        ]
        store, job_id, now = self.ctx.store, self.ctx.job_id, time.monotonic()
        unsettled = False
        for t in open_:
            state = store.trial_state(job_id, t.number)
            if state == TrialState.RUNNING:
                seen = self._unsettled.setdefault(t.number, now)
                if now - seen < self.ctx.worker.grace_s:
                    unsettled = True
                    continue
            self._settled.add(t.number)
            self._unsettled.pop(t.number, None)
            if state in _STORED or state == TrialState.RUNNING:
                self._retry(study, t, "its worker stopped before telling Optuna")
        return unsettled

    def tells_waiting(self, study: optuna.Study) -> bool:
        """True when every waiting trial is a retry of a trial whose result is stored: each
        only tells Optuna those values (``TrialRunner._reuse``, no launch), so the owner
        runs them even after the search closed. Any other waiting trial would launch."""
        waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        if not waiting:
            return False
        store, job_id = self.ctx.store, self.ctx.job_id
        for t in waiting:
            history = t.system_attrs.get("retry_history") or []
            if not history:
                return False
            if store.trial_state(job_id, history[-1]) not in (
                TrialState.COMPLETE,
                TrialState.PRUNED,
            ):
                return False
        return True

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
