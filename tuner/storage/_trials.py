"""Trial writes and finders of the ``Store`` (a mixin: ``Store`` supplies ``session()``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from tuner.errors import NotFound
from tuner.states import TRIAL_FINISHED, TrialState
from tuner.storage._models import MeasurementModel, TrialModel, utcnow
from tuner.storage._retry import retry_db

__all__ = ["LOG_TAIL_CHARS", "TrialNotFound", "TrialQueries"]

LOG_TAIL_CHARS = 4000  # what a failed trial keeps of its engine log


class TrialNotFound(NotFound):
    """No trial with that number in the job."""


def _load(rows: Iterable[TrialModel]) -> list[TrialModel]:
    out = list(rows)
    for r in out:
        _ = r.measurements  # loaded while the session is open: rows are used detached
    return out


class TrialQueries:
    session: Callable[[], AbstractContextManager[Session]]

    @retry_db
    def add_trial(
        self,
        job_id: int,
        number: int,
        *,
        method: str,
        params: dict[str, Any],
        engine_config: dict[str, Any],
        engine_key: str,
        worker_id: str | None = None,
        devices: str | None = None,
        search: dict[str, Any] | None = None,
    ) -> int:
        """A ``running`` row for a trial about to run; returns its id. Tried again after a
        lost connection, it returns the row its first attempt made."""
        q = select(TrialModel.trial_id).where(
            TrialModel.job_id == job_id, TrialModel.number == number
        )
        with self.session() as s:
            existing = s.scalars(q).first()
            if existing is not None:
                return existing
            row = TrialModel(
                job_id=job_id,
                number=number,
                state=TrialState.RUNNING,
                method=method,
                params=params,
                engine_config=engine_config,
                engine_key=engine_key,
                worker_id=worker_id,
                devices=devices,
                search=search,
            )
            s.add(row)
            s.flush()
            return row.trial_id

    @retry_db
    def store_results(
        self,
        trial_id: int,
        measurements: list[dict[str, Any]],
        extra: dict[str, Any],
        *,
        state: str,
    ) -> bool:
        """A trial's measured points and what its launch reported, in one transaction.
        False, storing nothing, when the row is no longer running: another worker declared
        the trial lost (its retry measures it), or a first attempt before a lost connection
        already stored it; either way a result is stored once."""
        with self.session() as s:
            # Locked (PostgreSQL: SELECT ... FOR UPDATE): a worker failing the row as lost
            # between this read and the write below would otherwise be overwritten.
            row = s.get(TrialModel, trial_id, with_for_update=True)
            if row is None:
                raise TrialNotFound(f"trial id {trial_id} not found")
            if row.state != TrialState.RUNNING:
                return row.state == state and bool(row.measurements or not measurements)
            for m in measurements:
                row.measurements.append(
                    MeasurementModel(
                        workload=m["workload"],
                        concurrency=m["concurrency"],
                        output_tok_per_s=m["output_tok_per_s"],
                        p99_tpot_ms=m.get("p99_tpot_ms"),
                        num_failed=m["num_failed"],
                        metrics=m,
                    )
                )
            for key in (
                "startup_s",
                "log_path",
                "reused_from",
                "kv_cache_tokens",
                "peak_rss_mb",
                "greedy_token_ids",
                "lossless_match_rate",
                "sampled_token_ids",
                "lossless_p_value",
                "token_sequences",
            ):
                setattr(row, key, extra.get(key))
            row.state = state
            row.finished_at = utcnow()
            return True

    @retry_db
    def finish_trial(
        self,
        trial_id: int,
        state: str,
        *,
        reason: str | None = None,
        detail: str | None = None,
        log_path: str | None = None,
    ) -> None:
        with self.session() as s:
            row = s.get(TrialModel, trial_id)
            if row is None:
                raise TrialNotFound(f"trial id {trial_id} not found")
            row.state = state
            row.fail_reason = reason
            row.fail_detail = detail[-LOG_TAIL_CHARS:] if detail else None
            if log_path:
                row.log_path = log_path
            row.finished_at = utcnow()

    @retry_db
    def add_trial_note(self, trial_id: int, key: str, value: Any) -> None:
        """One more entry in a trial's ``search`` notes: what is known only once the trial
        runs (pre-flight's notes)."""
        with self.session() as s:
            row = s.get(TrialModel, trial_id)
            if row is not None:
                row.search = {**(row.search or {}), key: value}

    @retry_db
    def set_trial_log(self, trial_id: int, log_path: str) -> None:
        with self.session() as s:
            row = s.get(TrialModel, trial_id)
            if row is not None:
                row.log_path = log_path

    @retry_db
    def trials(
        self,
        job_id: int,
        *,
        states: tuple[str, ...] | None = None,
        launched_only: bool = False,
    ) -> list[TrialModel]:
        """A job's trial rows by number, detached with their measurements."""
        q = select(TrialModel).where(TrialModel.job_id == job_id)
        if states is not None:
            q = q.where(TrialModel.state.in_(states))
        if launched_only:
            q = q.where(TrialModel.reused_from.is_(None))
        q = q.options(selectinload(TrialModel.measurements)).order_by(TrialModel.number)
        with self.session() as s:
            return _load(s.scalars(q).all())

    @retry_db
    def trials_version(self, job_id: int) -> tuple[int, int, datetime | None]:
        """(rows, finished rows, latest finish) of a job's trials, one cheap count. Rows are
        only added, and each moves once from running to a finished state with its results
        (every state write stamps ``finished_at``), so what a reader derived from ``trials``
        stays true while this does not change: the search reads a job's trials once per
        trial this way."""
        q = select(
            func.count(TrialModel.trial_id),
            func.count(TrialModel.finished_at),
            func.max(TrialModel.finished_at),
        ).where(TrialModel.job_id == job_id)
        with self.session() as s:
            n, finished, latest = s.execute(q).one()
        return int(n), int(finished), latest

    @retry_db
    def trial(self, job_id: int, number: int) -> TrialModel:
        q = select(TrialModel).where(TrialModel.job_id == job_id, TrialModel.number == number)
        with self.session() as s:
            row = s.scalars(q).first()
            if row is None:
                raise TrialNotFound(f"trial {number} of job {job_id} not found")
            return _load([row])[0]

    @retry_db
    def previous_run(
        self, job_id: int, engine_key: str, before: int, *, retried: int | None = None
    ) -> TrialModel | None:
        """The last trial before ``before`` that ran this engine configuration and says
        something about it (an interrupted or cancelled one does not). For a retry, the
        trial it runs again (``retried``) comes first when its result is stored: those are
        the values to tell Optuna, not another run of the same configuration (soak jobs 56
        and 213: a later run, or the run the lost trial had reused, was told instead)."""
        if retried is not None:
            own = select(TrialModel).where(
                TrialModel.job_id == job_id,
                TrialModel.number == retried,
                TrialModel.engine_key == engine_key,
                TrialModel.state.in_((TrialState.COMPLETE, TrialState.PRUNED)),
            )
            with self.session() as s:
                row = s.scalars(own).first()
                if row is not None:
                    return _load([row])[0]
        q = (
            select(TrialModel)
            .where(
                TrialModel.job_id == job_id,
                TrialModel.engine_key == engine_key,
                TrialModel.number < before,
                TrialModel.state.in_(sorted(TRIAL_FINISHED)),
                TrialModel.reused_from.is_(None),
            )
            .order_by(TrialModel.number)
        )
        with self.session() as s:
            rows = [r for r in s.scalars(q) if r.fail_reason not in ("interrupted", "cancelled")]
            return _load(rows[-1:])[0] if rows else None

    @retry_db
    def baseline_greedy(self, job_id: int, model: str) -> list[Any] | None:
        """Greedy token ids of the first baseline served from ``model``."""
        return self._baseline_outputs(job_id, model, TrialModel.greedy_token_ids)

    @retry_db
    def baseline_samples(self, job_id: int, model: str) -> list[Any] | None:
        """The distribution check's sampled continuations of the first baseline served from
        ``model`` that took them (the reference every candidate is tested against)."""
        return self._baseline_outputs(job_id, model, TrialModel.sampled_token_ids)

    def _baseline_outputs(self, job_id: int, model: str, column: Any) -> list[Any] | None:
        q = (
            select(TrialModel)
            .where(
                TrialModel.job_id == job_id,
                TrialModel.method == "none",
                column.is_not(None),
            )
            .order_by(TrialModel.number)
        )
        with self.session() as s:
            row = next((r for r in s.scalars(q) if r.engine_config.get("model") == model), None)
            return getattr(row, column.key) if row is not None else None

    @retry_db
    def measured_params(self, job_id: int) -> list[dict[str, Any]]:
        """Parameters of every trial that ran or runs (a waiting one has none yet)."""
        q = select(TrialModel.params).where(
            TrialModel.job_id == job_id,
            TrialModel.state.in_(list(TrialState)),
        )
        with self.session() as s:
            return [dict(r) for r in s.scalars(q).all()]

    @retry_db
    def replace_measurements(
        self,
        job_id: int,
        number: int,
        new: dict[tuple[str, int], dict[str, Any]],
        keep: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
    ) -> None:
        """Swap a trial's stored points for re-measured ones: ``keep(old, new)`` builds the
        stored dict (the confirmation keeps the search's numbers inside it)."""
        q = select(TrialModel).where(TrialModel.job_id == job_id, TrialModel.number == number)
        with self.session() as s:
            row = s.scalars(q).one()
            for mrow in row.measurements:
                m = new.get((mrow.workload, mrow.concurrency))
                if m is None:
                    continue
                m = keep(dict(mrow.metrics), m)
                mrow.metrics = m
                mrow.output_tok_per_s = m["output_tok_per_s"]
                mrow.p99_tpot_ms = m.get("p99_tpot_ms")
                mrow.num_failed = m["num_failed"]

    @retry_db
    def fail_orphaned_trials(
        self, job_id: int, numbers: Iterable[int] | None = None, *, detail: str | None = None
    ) -> None:
        """Rows left ``running`` by a worker that died become failed (``interrupted``):
        those of ``numbers``, or all of the job's."""
        q = (
            select(TrialModel)
            .where(TrialModel.job_id == job_id, TrialModel.state == TrialState.RUNNING)
            .with_for_update()  # a result stored meanwhile is not overwritten (PostgreSQL)
        )
        if numbers is not None:
            q = q.where(TrialModel.number.in_(list(numbers)))
        with self.session() as s:
            for r in s.scalars(q).all():
                r.state = TrialState.FAIL
                r.fail_reason = "interrupted"
                r.fail_detail = detail or "its worker stopped before the trial finished"
                r.finished_at = utcnow()

    @retry_db
    def trial_outcome(self, job_id: int, number: int) -> tuple[str, str | None] | None:
        """The stored state of one trial row and its failure reason, None when it has no
        row yet."""
        q = select(TrialModel.state, TrialModel.fail_reason).where(
            TrialModel.job_id == job_id, TrialModel.number == number
        )
        with self.session() as s:
            row = s.execute(q).first()
        return None if row is None else (row[0], row[1])

    @retry_db
    def trial_state(self, job_id: int, number: int) -> str | None:
        """The stored state of one trial row, None when it has none yet."""
        q = select(TrialModel.state).where(
            TrialModel.job_id == job_id, TrialModel.number == number
        )
        with self.session() as s:
            return s.scalars(q).first()
