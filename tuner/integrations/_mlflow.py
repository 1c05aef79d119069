"""Each trial as an MLflow run, the winner's exports as artifacts (optional extra ``mlflow``).

Why optional and off by default: teams that track experiments in MLflow want tuning jobs
beside their training runs, but SpecTune's own database stays the record. It is on when
``SPECTUNE_MLFLOW_TRACKING_URI`` is set (``SPECTUNE_MLFLOW_EXPERIMENT`` names the
experiment, default ``spectune``). A job is one parent run, each trial a child run with its
params, its medians and 95% intervals at every measured point, and tags for state, method,
reuse and feasibility. MLflow is imported only when enabled (it takes seconds to import).
A tracking server that fails is logged, never a failed tuning job.

Several workers (processes, see ``run_job(join=True)``) may log one job, and MLflow has no
unique constraint to create a run "if absent". So the parent is found by its tags (the
job id and a hash of the database URL), and a worker that finds none creates one, then
looks again: of all the job's parents it keeps the earliest (start time, then run id), moves
the trial runs of the others under it and deletes them. Every worker applies the same rule
on every lookup, so all converge on one parent. What stays racy: a trial run created under
a parent in the moment another worker deletes that parent points at a deleted run until
the job ends; the end of the job (``log_job_end``, ``log_job_stopped``) moves every trial
run of the job under the surviving parent.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from tuner.export import export_point, winner_exports
from tuner.integrations._dashboard import MEASURED_METRICS, trial_attrs
from tuner.pareto import job_report
from tuner.space import SearchSpace
from tuner.states import JobState, TrialState
from tuner.storage import Store

__all__ = [
    "ENV_EXPERIMENT",
    "ENV_TRACKING_URI",
    "MlflowUnavailable",
    "check_mlflow",
    "log_job_end",
    "log_job_stopped",
    "log_trial",
    "tracking_uri",
]

log = logging.getLogger(__name__)

ENV_TRACKING_URI = "SPECTUNE_MLFLOW_TRACKING_URI"
ENV_EXPERIMENT = "SPECTUNE_MLFLOW_EXPERIMENT"
_EXPORT_SUFFIX = {"vllm-json": "json", "vllm-schedule-json": "json", "trtllm-yaml": "yaml"}
# A job's state (tuner.storage) -> its parent run's status.
_RUN_STATUS = {
    JobState.SUCCEEDED: "FINISHED",
    JobState.CANCELLED: "KILLED",
    JobState.FAILED: "FAILED",
}


class MlflowUnavailable(RuntimeError):
    """The tracking URI is set but the ``mlflow`` extra is not installed."""


def tracking_uri() -> str | None:
    return os.environ.get(ENV_TRACKING_URI) or None


def _mlflow() -> Any:
    try:
        return importlib.import_module("mlflow")
    except ImportError:
        raise MlflowUnavailable(
            f"{ENV_TRACKING_URI} is set but mlflow is not installed: "
            "pip install 'spectune[mlflow]' (or unset it)"
        ) from None


def check_mlflow() -> None:
    """Refuse to start a job that was asked to log to MLflow and cannot."""
    if tracking_uri() is not None:
        _mlflow()


def _job_key(store: Store, job_id: int) -> str:
    """Job ids restart in every database: the tag names the database by a hash (a URL may
    carry a password, so it is never written)."""
    return f"{hashlib.sha256(store.url.encode()).hexdigest()[:8]}-{job_id}"


def _client() -> tuple[Any, Any]:
    mlflow = _mlflow()
    client = mlflow.tracking.MlflowClient(tracking_uri=tracking_uri())
    return mlflow, client


def _experiment_id(client: Any) -> str:
    name = os.environ.get(ENV_EXPERIMENT) or "spectune"
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # another worker created it since (RESOURCE_ALREADY_EXISTS)
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def _find(client: Any, exp_id: str, key: str, trial: int | None) -> Any | None:
    what = f"tags.`spectune.job` = '{key}' and tags.`spectune.trial` = "
    what += "'job'" if trial is None else f"'{trial}'"
    runs = client.search_runs([exp_id], filter_string=what, max_results=1)
    return runs[0] if runs else None


def _parents(client: Any, exp_id: str, key: str) -> list[Any]:
    """The job's live parent runs, the one every worker keeps first."""
    what = f"tags.`spectune.job` = '{key}' and tags.`spectune.trial` = 'job'"
    runs = client.search_runs([exp_id], filter_string=what, max_results=100)
    return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def _reparent(client: Any, exp_id: str, key: str, parent: str, only: set[str] | None) -> None:
    """Trial runs of the job under ``parent``: those under a run in ``only``, or all."""
    what = f"tags.`spectune.job` = '{key}'"
    for run in client.search_runs([exp_id], filter_string=what, max_results=50000):
        tags = run.data.tags
        if tags.get("spectune.trial") == "job" or tags.get("mlflow.parentRunId") == parent:
            continue
        if only is None or tags.get("mlflow.parentRunId") in only:
            client.set_tag(run.info.run_id, "mlflow.parentRunId", parent)


def _merge(client: Any, exp_id: str, key: str, runs: list[Any]) -> str:
    """Keep the first of the job's parents; the others' trials move under it, they go."""
    keep, extra = runs[0].info.run_id, {r.info.run_id for r in runs[1:]}
    if extra:
        log.info("MLflow: job %s had %d parent runs; keeping %s", key, len(runs), keep)
        _reparent(client, exp_id, key, keep, extra)
        for run_id in extra:
            try:
                client.delete_run(run_id)
            except Exception as e:  # another worker deleted it first
                log.debug("MLflow: duplicate parent %s not deleted: %s", run_id, e)
    return keep


def _parent(
    client: Any, exp_id: str, key: str, store: Store, job_id: int, reopen: bool = False
) -> str:
    """The job's parent run, created by the first worker to need it (see the module's
    docstring for two workers that create it at once). ``reopen``: a trial is being logged,
    so a parent that ended KILLED or FAILED (``spectune resume`` of a cancelled or failed
    job) runs again, never with live trials under an ended run."""
    runs = _parents(client, exp_id, key)
    if not runs:
        job = store.job(job_id)
        tags = {"spectune.job": key, "spectune.trial": "job", "spectune.space": job.name}
        mine = client.create_run(exp_id, tags=tags, run_name=f"job {job_id}")
        runs = _parents(client, exp_id, key)
        if mine.info.run_id not in {r.info.run_id for r in runs}:  # a store slow to show it
            runs = sorted([*runs, mine], key=lambda r: (r.info.start_time or 0, r.info.run_id))
    keep = _merge(client, exp_id, key, runs)
    if reopen and runs[0].info.status != "RUNNING":
        client.update_run(keep, status="RUNNING")
        client.set_tag(keep, "spectune.job_state", JobState.RUNNING)
    return keep


def _metric_key(*parts: Any) -> str:
    return "/".join(re.sub(r"[^A-Za-z0-9_.\- ]", "_", str(p)) for p in parts)


def _metrics(
    mlflow: Any, measurements: Sequence[dict[str, Any]], space: SearchSpace, prefix: str = ""
) -> list[Any]:
    """Medians and 95% bounds: plain names at the objective point, ``workload/cN/metric``
    at every point."""
    now = int(time.time() * 1000)
    out: dict[str, float] = {}
    primary = (space.primary_workload, space.primary_concurrency)
    for m in measurements:
        stats = m.get("stats") or {}
        for name in MEASURED_METRICS:
            vals = {name: m.get(name)}
            st = stats.get(name) or {}
            vals[f"{name}_ci95_low"] = st.get("ci95_low")
            vals[f"{name}_ci95_high"] = st.get("ci95_high")
            for k, v in vals.items():
                if not isinstance(v, int | float):
                    continue
                out[_metric_key(m["workload"], f"c{m['concurrency']}", prefix + k)] = v
                if (m["workload"], m["concurrency"]) == primary:
                    out[prefix + k] = v
    return [mlflow.entities.Metric(k, float(v), now, 0) for k, v in out.items()]


def _log_run(
    mlflow: Any,
    client: Any,
    ids: tuple[str, str, str],
    space: SearchSpace,
    record: dict[str, Any],
) -> None:
    """One child run for one trial (``record``: number, state, method, params,
    measurements, extra)."""
    exp_id, parent, key = ids
    attrs = trial_attrs(record["measurements"], record["extra"], space)
    tags = {
        "mlflow.parentRunId": parent,
        "spectune.job": key,
        "spectune.trial": str(record["number"]),
        "spectune.state": record["state"],
        "spectune.method": str(record["method"]),
    }
    if "feasible" in attrs:
        tags["spectune.feasible"] = str(attrs["feasible"]).lower()
    for k in ("reuses_trial", "replay", "violations"):
        if attrs.get(k) not in (None, [], ""):  # trial 0 is a trial to reuse
            tags[f"spectune.{k}"] = json.dumps(attrs[k])
    if record["extra"].get("fail_reason"):
        tags["spectune.fail_reason"] = str(record["extra"]["fail_reason"])
    run = client.create_run(exp_id, tags=tags, run_name=f"trial {record['number']}")
    params = [mlflow.entities.Param(k, json.dumps(v)) for k, v in record["params"].items()]
    metrics = _metrics(mlflow, record["measurements"], space)
    client.log_batch(run.info.run_id, metrics=metrics, params=params)
    status = "FAILED" if record["state"] == TrialState.FAIL else "FINISHED"
    client.set_terminated(run.info.run_id, status=status)


def log_trial(store: Store, job_id: int, space: SearchSpace, record: dict[str, Any]) -> None:
    """Log one stored trial as it ends; a no-op unless MLflow is enabled."""
    if tracking_uri() is None:
        return
    try:
        mlflow, client = _client()
        exp_id, key = _experiment_id(client), _job_key(store, job_id)
        parent = _parent(client, exp_id, key, store, job_id, reopen=True)
        if _find(client, exp_id, key, record["number"]) is None:
            _log_run(mlflow, client, (exp_id, parent, key), space, record)
    except MlflowUnavailable:
        raise
    except Exception as e:  # the tuning job goes on; SpecTune's database has the numbers
        log.warning("MLflow: trial %s of job %s not logged: %s", record["number"], job_id, e)


def log_job_end(store: Store, job_id: int) -> None:
    """At a job's end: runs for trials not logged yet (failed ones), the confirmed numbers
    (``confirmed_*``), and the winner's exports as artifacts of the job's run."""
    if tracking_uri() is None:
        return
    try:
        _log_job_end(store, job_id)
    except MlflowUnavailable:
        raise
    except Exception as e:
        log.warning("MLflow: end of job %s not logged: %s", job_id, e)


def _log_job_end(store: Store, job_id: int) -> None:
    mlflow, client = _client()
    space = store.space(job_id)
    exp_id, key = _experiment_id(client), _job_key(store, job_id)
    parent = _parent(client, exp_id, key, store, job_id)
    _reparent(client, exp_id, key, parent, None)
    for r in store.trial_records(job_id):
        if r.state in (TrialState.WAITING, TrialState.RUNNING):
            continue
        extra = {
            "reused_from": r.reused_from,
            "lossless_match_rate": r.lossless_match_rate,
            "fail_reason": r.fail_reason,
        }
        run = _find(client, exp_id, key, r.number)
        if run is None:
            record = dict(number=r.number, state=r.state, method=r.method, params=r.params)
            record.update(measurements=r.measurements, extra=extra)
            _log_run(mlflow, client, (exp_id, parent, key), space, record)
        elif r.metrics.get("confirmed"):
            ms = [m for m in r.measurements if m.get("confirmed")]
            client.log_batch(run.info.run_id, metrics=_metrics(mlflow, ms, space, "confirmed_"))
            client.set_tag(run.info.run_id, "spectune.confirmed", "true")
    rep = job_report(store, job_id)
    reasons = winner_exports(rep)
    if rep.winner is not None:
        client.set_tag(parent, "spectune.winner_trial", str(rep.winner.trial_number))
        for fmt, why in reasons.items():
            if why is None:
                text = export_point(rep.winner, fmt, rep)
                name = f"exports/{fmt}.{_EXPORT_SUFFIX.get(fmt, 'txt')}"
                client.log_text(parent, text, name)
    missing = {fmt: why for fmt, why in reasons.items() if why is not None}
    if missing:
        client.log_text(parent, json.dumps(missing, indent=2), "exports/unavailable.json")
    client.set_terminated(parent, status="FINISHED")


def log_job_stopped(store: Store, job_id: int, state: str) -> None:
    """A job ended ``cancelled`` or ``failed`` (or ``succeeded``): its parent run ends
    KILLED, FAILED (or FINISHED), all its trial runs under it. A job that logged no trial
    has no run to end. Never raises: it runs while the job's own exception is raised."""
    if tracking_uri() is None:
        return
    try:
        _, client = _client()
        exp = client.get_experiment_by_name(os.environ.get(ENV_EXPERIMENT) or "spectune")
        key = _job_key(store, job_id)
        runs = [] if exp is None else _parents(client, exp.experiment_id, key)
        if not runs:
            return
        parent = _merge(client, exp.experiment_id, key, runs)
        _reparent(client, exp.experiment_id, key, parent, None)
        client.set_tag(parent, "spectune.job_state", state)
        client.set_terminated(parent, status=_RUN_STATUS.get(state, "FAILED"))
    except Exception as e:  # MlflowUnavailable too: on_job_start has said it already
        log.warning("MLflow: end of job %s (%s) not logged: %s", job_id, state, e)
