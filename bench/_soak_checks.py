"""The soak's end-of-run checks (bench/soak.py), read from the database after every process
has stopped: what a fault may never do, counted so that the answer to each is a number.

- a lost job: an id the API answered with and the database does not hold;
- a lost trial: a trial of a succeeded job that started (its row exists) and has no
  outcome, neither itself nor any retry of it (a job may stop before its budget: slots it
  never started are not lost);
- a duplicated trial: one slot (an original and its retries) measured more than once, or a
  trial number stored twice;
- a disagreement: an Optuna trial and SpecTune's row for it in different states, a finished
  Optuna trial without a row, a row without an Optuna trial, or a trial still running. A
  result stored by a worker that stopped before telling Optuna (its trial then failed as
  stale) agrees only once a retry has told Optuna those values with no launch (its row
  reuses the stored one): counted as ``told_by_retry``. A retry the job did not run because
  its search had closed on its outlook (nothing left could win, the lost trial's
  configuration included) is failed in Optuna with why (``NOT_RUN_ATTR``): it accounts for
  its lost trial, and is counted as ``retries_not_run``; so is a trial a helper asked after
  the job had ended (it stalled between taking its slot and asking);
- an orphan engine: an engine process group alive with no worker left to own it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import optuna

from tests.faults.faultkit import engine_groups, group_alive, survivors
from tuner.recovery import NOT_RUN_ATTR
from tuner.states import JOB_ENDED
from tuner.storage import JobNotFound, Store

__all__ = ["check_jobs", "orphan_engines"]

# Optuna's state names against the ones SpecTune's trial rows store.
_SAME = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "fail", "RUNNING": "running"}


def _history(t: optuna.trial.FrozenTrial) -> list[int]:
    return list(t.system_attrs.get("retry_history") or [])


def _agreement(url: str, job_id: int) -> tuple[list[str], int, int, int]:
    """Where Optuna's trials and SpecTune's rows of one job disagree (empty: they agree),
    how many results were stored but not told, how many started trials are lost, and how
    many retries the job did not run (its search had closed)."""
    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=url)
    rows = {r.number: r for r in Store(url).trials(job_id)}
    problems, not_told, not_run = [], 0, 0
    chains: dict[int, bool] = {}  # the first trial of a chain -> some member has an outcome
    retried = {n for t in study.trials for n in _history(t)}  # a chain's lost runs
    job = Store(url).job(job_id)
    cancelled = job.state == "cancelled" or bool(job.cancel_requested)  # a user's cancel
    told = {  # trials whose stored result a retry told Optuna, with no launch
        r.reused_from
        for r in rows.values()
        if r.reused_from is not None
        and r.state in ("complete", "pruned")
        and study.trials[r.number].system_attrs.get("retry_history", [None])[-1] == r.reused_from
    }
    for t in study.trials:
        if t.state.name == "WAITING":
            continue  # enqueued, never started: no row yet, by design
        row = rows.pop(t.number, None)
        dropped = row is None and t.state.name == "FAIL" and NOT_RUN_ATTR in t.system_attrs
        not_run += dropped
        if dropped:
            pass  # not run (a retry after the search closed; asked after the end), saying why
        elif row is None and t.state.name == "FAIL" and (cancelled or t.number in retried):
            pass  # asked, then a cancel or its worker's death came before its row: read so
        elif row is None:
            problems.append(f"trial {t.number}: Optuna {t.state.name}, no SpecTune row")
        elif row.state != _SAME[t.state.name]:
            if t.state.name == "FAIL" and t.number in told:
                not_told += 1
            else:
                retries = [u.number for u in study.trials if t.number in _history(u)]
                problems.append(
                    f"trial {t.number}: Optuna {t.state.name}, SpecTune {row.state} "
                    f"(retry_history {_history(t)}, retried by {retries}, job {job.state})"
                )
        if t.state.name == "RUNNING":
            problems.append(f"trial {t.number}: still running after the soak")
        root = int(t.system_attrs.get("failed_trial", t.number))
        done = dropped or (
            row is not None
            and (
                row.state in ("complete", "pruned")
                or (row.state == "fail" and row.fail_reason != "interrupted")
            )
        )
        chains[root] = chains.get(root, False) or done
    problems += [f"trial {n}: SpecTune row without an Optuna trial" for n in sorted(rows)]
    return problems, not_told, sum(not ok for ok in chains.values()), not_run


def check_jobs(url: str, job_ids: set[int]) -> dict[str, Any]:
    """Every check on the jobs the API said it created."""
    store = Store(url)
    states: Counter[str] = Counter()
    lost_jobs: list[int] = []
    unfinished: list[int] = []
    failed: dict[int, str | None] = {}
    lost = duplicated = trials = not_told = not_run = 0
    disagreements: dict[int, list[str]] = {}
    for job_id in sorted(job_ids):
        try:
            job = store.job(job_id)
        except JobNotFound:
            lost_jobs.append(job_id)
            continue
        states[job.state] += 1
        if job.state not in JOB_ENDED:
            unfinished.append(job_id)
        if job.state == "failed":
            failed[job_id] = job.error
        got = survivors(url, job_id)
        trials += len(got["optuna_states"])
        duplicated += int(got["duplicated"])
        problems, told, lost_here, dropped = _agreement(url, job_id)
        not_told += told
        not_run += dropped
        if job.state == "succeeded":
            lost += lost_here  # a cancelled or failed job's trials may end interrupted
        if problems:
            disagreements[job_id] = problems
    return {
        "jobs_finished": sum(n for s, n in states.items() if s in JOB_ENDED),
        "job_states": dict(states),
        "lost_jobs": lost_jobs,
        "unfinished_jobs": unfinished,
        "failed_jobs": failed,
        "trials": trials,
        "lost_trials": lost,
        "duplicated_trials": duplicated,
        "disagreements": disagreements,
        "told_by_retry": not_told,
        "retries_not_run": not_run,
    }


def orphan_engines(work_dir: Path) -> list[int]:
    """Engine process groups still alive once every worker has stopped (their pid files in
    the workers' shared ``run`` folder): none may be."""
    return sorted(g for g in engine_groups(work_dir) if group_alive(g))
