"""The machine's launch history (a mixin of ``Store``, which supplies ``session()``): the
stored points of earlier finished jobs on the same hardware, engine kind and target, which
``tuner.launch_history`` pools into a job's between-launch spread.

Why here: only the ``Store`` opens sessions, and one call (two SELECTs in one session) keeps
a report's history read cheap: the jobs' stored spaces first, then the points of the
matching jobs' trials. Nothing is cached: the next report reads afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tuner.states import JobState, TrialState
from tuner.storage._models import JobModel, MeasurementModel, TrialModel
from tuner.storage._retry import retry_db
from tuner.storage._stored_space import space_of_job

__all__ = ["HistoryQueries"]

_MEASURED = (TrialState.COMPLETE, TrialState.PRUNED)


def _machine(job: JobModel) -> tuple[str, str, str] | None:
    """(hardware fingerprint, engine kind, main target) a job measured on; None when it has
    no fingerprint, replayed a recorded surface (nothing was measured on a machine), or its
    stored space cannot be read even with defaults."""
    data = job.space
    if not isinstance(data, dict) or not data.get("hardware"):
        return None
    try:
        space = space_of_job(job, for_reading=True)
    except ValueError:  # SpaceRefused (a SpaceError) included
        return None
    if space.engine.surface is not None:
        return None
    return str(data["hardware"]), space.engine.kind, space.resolve_model(space.engine.model)


class HistoryQueries:
    """Mixin of ``Store``: what earlier jobs on this machine measured, launch by launch."""

    session: Callable[[], AbstractContextManager[Session]]

    @retry_db
    def launch_history(self, job_id: int, *, target: str) -> dict[int, list[dict[str, Any]]]:
        """Earlier job id -> the stored points (each with its ``launches`` records) of its
        launched, complete or pruned trials served from ``target``, for every succeeded job
        other than ``job_id`` with ``job_id``'s hardware fingerprint and engine kind that
        finished before ``job_id`` did (every one so far while ``job_id`` runs: a job that
        ended reads the same history tomorrow, later jobs never change its report).

        A trial's served model is its own (an MTP checkpoint) or its job's main target, both
        resolved against that job's folder as the warm start compares them. Empty when
        ``job_id`` is unknown, has no fingerprint or is a replay; a replayed earlier job
        never counts (its numbers were not measured on this machine)."""
        with self.session() as s:
            me = s.get(JobModel, job_id)
            key = _machine(me) if me is not None else None
            if key is None:
                return {}
            q = select(JobModel).where(
                JobModel.job_id != job_id, JobModel.state == JobState.SUCCEEDED
            )
            if me.finished_at is not None:  # an ended job's report stays as it was
                q = q.where(JobModel.finished_at <= me.finished_at)
            mains: dict[int, str] = {}
            for j in s.scalars(q.order_by(JobModel.job_id)):
                if not isinstance(j.space, dict) or j.space.get("hardware") != key[0]:
                    continue  # the cheap test first: most jobs of another machine stop here
                other = _machine(j)
                if other is not None and other[:2] == key[:2]:
                    mains[j.job_id] = other[2]
            if not mains:
                return {}
            rows = s.execute(
                select(TrialModel.job_id, TrialModel.engine_config, MeasurementModel.metrics)
                .join(MeasurementModel, MeasurementModel.trial_id == TrialModel.trial_id)
                .where(
                    TrialModel.job_id.in_(sorted(mains)),
                    TrialModel.state.in_(_MEASURED),
                    TrialModel.reused_from.is_(None),
                )
                .order_by(TrialModel.job_id, TrialModel.number, MeasurementModel.concurrency)
            ).all()
        out: dict[int, list[dict[str, Any]]] = {}
        for jid, config, metrics in rows:
            if ((config or {}).get("model") or mains[jid]) == target:
                out.setdefault(jid, []).append(dict(metrics))
        return out
