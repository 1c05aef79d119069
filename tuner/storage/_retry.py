"""Riding out a database restart: retry a write with backoff, for our tables and Optuna's.

Why: a job runs for hours while its database may restart (an upgrade, a fail-over). A lost
connection raises once; SQLAlchemy then drops the pool (and ``pool_pre_ping`` tests the next
connection), so the same write tried again a moment later succeeds and no result is lost.
Only connection-level errors are retried; a constraint or a bad query fails at once.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

import optuna
import sqlalchemy
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from tuner._repeated import RepeatedFailure

__all__ = [
    "RETRY_FOR_S",
    "ResilientRDBStorage",
    "is_disconnect",
    "no_retry",
    "retry_call",
    "retry_db",
]

log = logging.getLogger("spectune.storage")

RETRY_FOR_S = 120.0  # how long a write keeps trying before the error reaches the job
_FIRST_WAIT_S, _MAX_WAIT_S = 0.25, 5.0

P = ParamSpec("P")
R = TypeVar("R")


def is_disconnect(exc: BaseException) -> bool:
    """A lost or refused connection, anywhere in the cause chain (``StorageError`` and
    Optuna's ``StorageInternalError`` wrap the SQLAlchemy error)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OperationalError | InterfaceError):
            return True
        if isinstance(seen, DBAPIError) and seen.connection_invalidated:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retry_call(
    fn: Callable[[], R],
    *,
    retry_if: Callable[[Exception], bool],
    for_s: float,
    on_retry: Callable[[Exception, float], None] | None = None,
) -> R:
    """``fn()``, called again with exponential backoff while ``retry_if`` holds for its
    error, for ``for_s`` at most; then the error goes on up. The one backoff the storage,
    the schema check and the service's start share."""
    deadline = time.monotonic() + for_s
    wait = _FIRST_WAIT_S
    while True:
        try:
            return fn()
        except Exception as e:
            if not retry_if(e) or time.monotonic() + wait > deadline:
                raise
            if on_retry is not None:
                on_retry(e, wait)
            time.sleep(wait)
            wait = min(2 * wait, _MAX_WAIT_S)


def retry_db(fn: Callable[P, R]) -> Callable[P, R]:
    """Call ``fn`` (a method of an object with a ``url``) again with exponential backoff
    while a server database is unreachable, for the object's ``retry_for_s`` at most."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        owner = args[0] if args else None
        # A SQLite file does not restart: only its write lock (other workers) is waited out.
        sqlite = str(getattr(owner, "url", "")).startswith("sqlite")

        def retry_if(e: Exception) -> bool:
            return "database is locked" in str(e) if sqlite else is_disconnect(e)

        def on_retry(e: Exception, wait: float) -> None:
            log.warning("database unreachable in %s; retrying in %.2f s", fn.__name__, wait)

        return retry_call(
            lambda: fn(*args, **kwargs),
            retry_if=retry_if,
            for_s=getattr(owner, "retry_for_s", RETRY_FOR_S),
            on_retry=on_retry,
        )

    wrapper.__retry_db__ = True  # type: ignore[attr-defined]
    return wrapper


def no_retry(fn: Callable[P, R]) -> Callable[P, R]:
    """Marks a ``Store`` method tried once on purpose (its docstring says why). Every public
    method of the ``Store`` carries ``retry_db`` or this, so a new one states its choice
    (tests/storage checks it)."""
    fn.__no_retry__ = True  # type: ignore[attr-defined]
    return fn


class ResilientRDBStorage(RDBStorage):
    """Optuna's RDB storage whose calls survive a database restart, and whose trial
    heartbeat never dies of one (Optuna's heartbeat thread ends at its first error, after
    which the trial would look dead to the other workers while it still runs).

    Retried after a lost connection: the reads, which are safe to repeat, and the writes
    below, also safe except that a repeated finishing write may find its first attempt
    applied (``set_trial_state_values`` handles that)."""

    get_study_id_from_name = retry_db(RDBStorage.get_study_id_from_name)
    get_study_directions = retry_db(RDBStorage.get_study_directions)
    get_study_user_attrs = retry_db(RDBStorage.get_study_user_attrs)
    get_study_system_attrs = retry_db(RDBStorage.get_study_system_attrs)
    get_trial = retry_db(RDBStorage.get_trial)
    get_all_trials = retry_db(RDBStorage.get_all_trials)
    # What Optuna's cache in front of every study calls instead of the public methods
    # (``study.get_trials`` is ``_get_trials``): unwrapped, a restart mid-read failed the
    # job (found by bench/soak.py).
    _get_trials = retry_db(RDBStorage._get_trials)
    _get_best_trial_id = retry_db(RDBStorage._get_best_trial_id)
    _create_new_trial = retry_db(RDBStorage._create_new_trial)
    _set_trial_param = retry_db(RDBStorage._set_trial_param)
    get_study_name_from_id = retry_db(RDBStorage.get_study_name_from_id)
    get_all_studies = retry_db(RDBStorage.get_all_studies)
    get_n_trials = retry_db(RDBStorage.get_n_trials)
    get_trial_id_from_study_id_trial_number = retry_db(
        RDBStorage.get_trial_id_from_study_id_trial_number
    )
    get_best_trial = retry_db(RDBStorage.get_best_trial)
    create_new_trial = retry_db(RDBStorage.create_new_trial)
    set_trial_param = retry_db(RDBStorage.set_trial_param)
    set_trial_intermediate_value = retry_db(RDBStorage.set_trial_intermediate_value)
    set_trial_user_attr = retry_db(RDBStorage.set_trial_user_attr)
    set_trial_system_attr = retry_db(RDBStorage.set_trial_system_attr)
    _get_stale_trial_ids = retry_db(RDBStorage._get_stale_trial_ids)
    # A study's names and labels (``label_study`` as a job is made: a restart then was a 503
    # on ``POST /api/jobs``); setting a key again is harmless.
    set_study_user_attr = retry_db(RDBStorage.set_study_user_attr)
    set_study_system_attr = retry_db(RDBStorage.set_study_system_attr)

    def set_trial_state_values(
        self, trial_id: int, state: optuna.trial.TrialState, values: Any = None
    ) -> bool:
        attempt = 0

        def once() -> bool:
            nonlocal attempt
            attempt += 1
            try:
                return RDBStorage.set_trial_state_values(self, trial_id, state, values)
            except UpdateFinishedTrialError:
                if attempt > 1 and self.get_trial(trial_id).state == state:
                    return True  # the first attempt was applied before the connection dropped
                raise

        return retry_db(once)()

    @retry_db
    def unbeaten_trial_ids(self, study_id: int, older_than_s: float) -> list[int]:
        """Running trials that never recorded a heartbeat and started over ``older_than_s``
        ago: Optuna's staleness check skips them, yet nobody runs them (a worker died
        between asking and its first beat, or a job stored before heartbeats)."""
        with _create_scoped_session(self.scoped_session, True) as session:
            cutoff = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=older_than_s)
            beaten = sqlalchemy.select(models.TrialHeartbeatModel.trial_id)
            rows = session.execute(
                sqlalchemy.select(models.TrialModel.trial_id).where(
                    models.TrialModel.study_id == study_id,
                    models.TrialModel.state == optuna.trial.TrialState.RUNNING,
                    models.TrialModel._datetime_start_utc < cutoff,
                    models.TrialModel.trial_id.not_in(beaten),
                )
            )
            return [r[0] for r in rows]

    @retry_db
    def running_study_names(self) -> list[str]:
        """The studies with a running trial, in one read: what the sweep of ended jobs
        starts from (``tuner.recovery.EndedJobSweep``)."""
        with _create_scoped_session(self.scoped_session, True) as session:
            rows = session.execute(
                sqlalchemy.select(models.StudyModel.study_name)
                .join(models.TrialModel, models.TrialModel.study_id == models.StudyModel.study_id)
                .where(models.TrialModel.state == optuna.trial.TrialState.RUNNING)
                .distinct()
            )
            return [r[0] for r in rows]

    _beat_failing: RepeatedFailure | None = None  # made at the first beat

    def record_heartbeat(self, trial_id: int) -> None:
        # A read-only or lost database fails every beat alike: one traceback, then a line
        # every few minutes (RepeatedFailure).
        if self._beat_failing is None:
            self._beat_failing = RepeatedFailure(log, "trial heartbeat (not recorded)")
        try:
            retry_db(RDBStorage.record_heartbeat)(self, trial_id)
        except Exception as e:
            self._beat_failing.failed(e)
        else:
            self._beat_failing.ok()
