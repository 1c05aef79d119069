"""One trial: sample a candidate, reuse an earlier run of the same engine configuration or
measure it (launch or replay), store what it measured, and report it to Optuna.

Data flow: sample (define-by-run) -> engine config -> reuse? -> pre-flight -> measure every
point (objective point first; pruning may stop there) -> lossless check -> store ->
objective values and SLO constraints to Optuna.
"""

from __future__ import annotations

import functools
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback

from tuner.candidates import engine_config, sample_candidate
from tuner.engines import EngineConfig
from tuner.integrations import on_trial_stored
from tuner.measure import (
    JobCancelled,
    JobControl,
    Measurer,
    Pruned,
    TrialFailed,
    constraint_values,
    lossless_match,
    objective_values,
)
from tuner.search import GUIDE_ATTR, SearchStrategy
from tuner.space import SearchSpace
from tuner.storage import Store

__all__ = ["MAX_RETRY", "Recovery", "TrialEvent", "TrialRunner", "run_one"]


@dataclass(frozen=True)
class TrialEvent:
    """What a progress display needs after each trial."""

    number: int
    n_trials: int
    state: str
    method: str
    params: dict[str, Any]
    seconds: float
    summary: str


def _summary(primary: dict[str, Any], extra: dict[str, Any]) -> str:
    acc = primary.get("acceptance_rate")
    rate = extra.get("lossless_match_rate")
    out = (
        f"{primary['output_tok_per_s']:.1f} tok/s, p99 TPOT "
        f"{primary.get('p99_tpot_ms') or float('nan'):.2f} ms"
    )
    if acc is not None:
        out += f", acceptance {acc:.1%}"
    if rate is not None:
        out += f", greedy match {rate:.0%}"
    if primary.get("noisy"):
        out += " (noisy)"
    if extra.get("reused_from") is not None:
        out += f" (reused trial {extra['reused_from']})"
    return out


def _lost(number: int) -> TrialFailed:
    return TrialFailed(
        "interrupted",
        f"trial {number} was declared lost (its heartbeat stopped) while it ran; its retry "
        "measures it, so this result is not stored",
    )


class TrialRunner:
    """The objective Optuna calls: one trial per call."""

    def __init__(
        self,
        store: Store,
        job_id: int,
        space: SearchSpace,
        measurer: Measurer,
        strategy: SearchStrategy,
        *,
        log_dir: Path,
        n_trials: int,
        control: JobControl,
        on_trial: Callable[[TrialEvent], None] | None = None,
        on_start: Callable[[int, dict[str, Any]], None] | None = None,
        worker_id: str | None = None,
        devices: str | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        self.store, self.job_id, self.space = store, job_id, space
        self.measurer, self.strategy, self.control = measurer, strategy, control
        self.log_dir, self.n_trials = log_dir, n_trials
        self.on_trial, self.on_start = on_trial, on_start
        self.worker_id, self.devices = worker_id, devices
        self.stopping = stopping or (lambda: False)
        self.interrupted: list[int] = []  # trials cut short by this worker stopping

    def __call__(self, trial: optuna.Trial) -> list[float]:
        if self.control.cancelled:
            raise JobCancelled("job cancelled")
        t0 = time.monotonic()
        params, note = self._candidate(trial)
        cfg = engine_config(params, self.space)
        if self.on_start:
            self.on_start(trial.number, params)
        trial_id = self.store.add_trial(
            self.job_id,
            trial.number,
            method=params["method"],
            params=params,
            engine_config=cfg.to_dict(),
            engine_key=cfg.key(),
            worker_id=self.worker_id,
            devices=self.devices,
            search=note,
        )
        trial.set_user_attr("spectune_trial_id", trial_id)
        try:
            measurements, extra = self._run(trial, cfg, params)
            primary = next(
                m
                for m in measurements
                if (m["workload"], m["concurrency"])
                == (self.space.primary_workload, self.space.primary_concurrency)
            )
            cons = constraint_values(primary, self.space.slo.limits())
            rate = extra.get("lossless_match_rate")
            if rate is not None and self.space.lossless.enabled:
                cons["lossless"] = self.space.lossless.min_match_rate - rate
            for k, v in cons.items():
                trial.set_constraint(k, v)
            values = objective_values(primary, self.space)
        except TrialFailed as e:
            self.store.finish_trial(
                trial_id, "fail", reason=e.reason, detail=e.detail, log_path=e.log_path
            )
            self._emit(trial.number, "fail", params, t0, f"{e.reason}")
            raise
        except Pruned as e:
            if not self.store.store_results(trial_id, e.measurements, e.extra, state="pruned"):
                raise _lost(trial.number) from None
            on_trial_stored(self, trial, params, "pruned", e.measurements, e.extra)
            self.store.finish_trial(trial_id, "pruned", reason="pruned", detail=e.evidence)
            self._emit(trial.number, "pruned", params, t0, e.evidence)
            raise optuna.TrialPruned(e.evidence) from None
        except BaseException as e:  # interrupted: keep the record honest
            user = isinstance(e, JobCancelled) and not self.stopping()
            if not user:
                self.interrupted.append(trial.number)
            reason = "cancelled" if user else "interrupted"
            self.store.finish_trial(trial_id, "fail", reason=reason, detail=repr(e))
            raise
        if not self.store.store_results(trial_id, measurements, extra, state="complete"):
            raise _lost(trial.number)
        on_trial_stored(self, trial, params, "complete", measurements, extra)
        self._emit(trial.number, "complete", params, t0, _summary(primary, extra))
        return values

    def _candidate(self, trial: optuna.Trial) -> tuple[dict[str, Any], dict[str, Any]]:
        """The configuration to launch (its class's member) and how it was proposed."""
        proposed = sample_candidate(trial, self.space)
        params, why = self.strategy.canonical(proposed)
        note = dict(trial.user_attrs.get(GUIDE_ATTR) or {"by": "sampler"})
        if not note.get("predicted") and (pred := self.strategy.prediction_for(params)):
            note["predicted"] = pred  # priced before the launch, whoever proposed it
        if why:
            changed = {k: v for k, v in proposed.items() if params.get(k) != v}
            note["class"] = {"proposed": changed, "why": why}
        return params, note

    def _emit(self, number: int, state: str, params: dict, t0: float, summary: str) -> None:
        if self.on_trial:
            self.on_trial(
                TrialEvent(
                    number,
                    self.n_trials,
                    state,
                    params["method"],
                    params,
                    time.monotonic() - t0,
                    summary,
                )
            )

    def _reuse(
        self, trial: optuna.Trial, cfg: EngineConfig, params: dict[str, Any]
    ) -> tuple[list[dict], dict] | None:
        """The same engine configuration was already measured in this job: reuse it, no
        launch, and steer the next trial to an unmeasured neighbour instead of a repeat."""
        prev = self.store.previous_run(self.job_id, cfg.key(), trial.number)
        if prev is None:
            return None
        self.strategy.enqueue_neighbour(trial, params)
        ms = [dict(m.metrics) for m in prev.measurements]
        if prev.state == "pruned":
            raise Pruned(
                f"same configuration as trial {prev.number}, pruned: {prev.fail_detail}",
                ms,
                {"reused_from": prev.number},
            )
        if prev.state == "fail":
            raise TrialFailed(
                prev.fail_reason or "crash",
                f"same configuration as trial {prev.number}, which failed: "
                + (prev.fail_detail or ""),
            )
        return ms, {
            "reused_from": prev.number,
            "kv_cache_tokens": prev.kv_cache_tokens,
            "peak_rss_mb": prev.peak_rss_mb,
            "lossless_match_rate": prev.lossless_match_rate,
        }

    def _lossless(self, cfg: EngineConfig, ids: list[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"greedy_token_ids": ids}
        if cfg.speculative_config is not None:
            ref = self.store.baseline_greedy(self.job_id, cfg.model)
            out["lossless_match_rate"] = lossless_match(ref, ids) if ref is not None else None
        return out

    def _run(
        self, trial: optuna.Trial, cfg: EngineConfig, params: dict[str, Any]
    ) -> tuple[list[dict], dict]:
        reused = self._reuse(trial, cfg, params)
        if reused is not None:
            return reused
        self.measurer.check(cfg)
        prune = None
        if self.space.measurement.prune and cfg.speculative_config is not None:
            prune = functools.partial(self.strategy.prune_check, model=cfg.model)
        lossless = None
        if self.space.lossless.enabled:
            lossless = functools.partial(self._lossless, cfg)
        log_path = self.log_dir / f"trial-{trial.number}.log"
        return self.measurer.measure(cfg, params, log_path, prune=prune, lossless=lossless)


MAX_RETRY = 1  # a lost trial runs once more; lost again, it stays failed and counts


class _TrialBeat(threading.Thread):
    """The running trial's heartbeat in Optuna's table, every ``heartbeat_interval``: what
    lets the other workers tell a trial whose worker died from a slow one."""

    def __init__(self, storage: optuna.storages.BaseStorage, trial_id: int) -> None:
        super().__init__(name=f"spectune-trial-beat-{trial_id}", daemon=True)
        self.storage, self.trial_id = storage, trial_id
        interval = getattr(storage, "get_heartbeat_interval", None)
        self.every_s = interval() if interval is not None else None
        self.done = threading.Event()

    def run(self) -> None:
        record = getattr(self.storage, "record_heartbeat", None)
        if record is None or not self.every_s:
            return
        while True:
            record(self.trial_id)
            if self.done.wait(self.every_s):
                return

    def stop(self) -> None:
        self.done.set()
        if self.is_alive():
            self.join(timeout=10)


def run_one(study: optuna.Study, runner: TrialRunner) -> None:
    """One trial as ``study.optimize`` runs it (ask, heartbeat while it runs, tell), but told
    with ``skip_if_finished``: a trial another worker declared lost meanwhile stays failed
    instead of failing the job. ``TrialFailed`` and pruning end the trial, not the job."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
        trial = study.ask()  # what optimize would do, heartbeat included (below)
    beat = _TrialBeat(study._storage, trial._trial_id)
    beat.start()
    values: list[float] | None = None
    state: optuna.trial.TrialState | None = None
    try:
        values = runner(trial)
    except optuna.TrialPruned:
        state = optuna.trial.TrialState.PRUNED
    except TrialFailed:
        state = optuna.trial.TrialState.FAIL
    except BaseException:
        beat.stop()
        study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        raise
    beat.stop()
    study.tell(trial, values, state=state, skip_if_finished=True)


class Recovery:
    """What becomes of a trial whose worker is gone: failed (``interrupted``) and, when it
    has no stored result, run once more by whichever worker takes the next slot. Its slot
    goes back to the budget, so a crash costs time, never a trial; a stored result is never
    measured twice."""

    def __init__(self, store: Store, job_id: int, grace_s: float) -> None:
        self.store, self.job_id, self.grace_s = store, job_id, grace_s
        self.storage: optuna.storages.BaseStorage | None = None  # the RDB storage, once made

    def on_stale(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna's ``heartbeat_stale_trial_callback``: the trial is already failed there."""
        self._retry(study, trial, "its worker stopped beating (killed, or cut off)")

    def _retry(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial, why: str, *, row: bool = True
    ) -> bool:
        if row and self.store.trial_state(self.job_id, trial.number) not in (None, "running"):
            return False  # its result (or its failure) is stored: keep it, run nothing again
        self.store.fail_orphaned_trials(self.job_id, [trial.number], detail=why)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            history = RetryHeartbeatStaleTrialCallback.retry_history(trial)
            if len(history) >= MAX_RETRY:
                return False
            RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)(study, trial)
        self.store.refund_trial_slot(self.job_id)
        return True

    def requeue(self, study: optuna.Study, numbers: list[int]) -> None:
        """Trials this worker cut short when asked to stop run again elsewhere."""
        trials = study.get_trials(deepcopy=False)
        for n in numbers:
            if n < len(trials) and trials[n].state == optuna.trial.TrialState.FAIL:
                self._retry(study, trials[n], "its worker was stopped", row=False)

    def sweep(self, study: optuna.Study) -> None:
        """Fail the trials of dead workers: those whose heartbeat went stale (Optuna's
        check, which calls ``on_stale``) and those that never beat at all."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        storage = self.storage
        find = getattr(storage, "unbeaten_trial_ids", None)
        if storage is None or find is None:
            return
        fail = optuna.trial.TrialState.FAIL
        for tid in find(storage.get_study_id_from_name(study.study_name), self.grace_s):
            try:
                if storage.set_trial_state_values(tid, state=fail):
                    self._retry(study, storage.get_trial(tid), "its worker never beat")
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # another worker got there first
