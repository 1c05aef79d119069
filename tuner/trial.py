"""One trial: sample a candidate, reuse an earlier run of the same engine configuration or
measure it (launch or replay), store what it measured, and report it to Optuna.

Data flow: sample (define-by-run) -> engine config -> reuse? -> pre-flight -> measure every
point (objective point first; pruning may stop there) -> lossless check -> store ->
objective values and SLO constraints to Optuna. What happens to a trial whose worker dies is
``tuner.recovery``'s.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import optuna

from tuner.candidates import engine_config, sample_candidate
from tuner.context import JobContext, TrialEvent
from tuner.engines import EngineConfig
from tuner.integrations import on_trial_stored
from tuner.measure import (
    JobCancelled,
    Measured,
    Measurer,
    Pruned,
    Samples,
    TrialFailed,
    constraint_values,
    distribution_p_value,
    lossless_match,
    objective_values,
)
from tuner.recovery import NOT_RUN_ATTR
from tuner.search import GUIDE_ATTR, SearchStrategy
from tuner.states import TrialState

__all__ = ["TrialEvent", "TrialRunner"]

log = logging.getLogger(__name__)


def _summary(primary: dict[str, Any], got: Measured) -> str:
    acc = primary.get("acceptance_rate")
    rate = got.lossless_match_rate
    out = (
        f"{primary['output_tok_per_s']:.1f} tok/s, p99 TPOT "
        f"{primary.get('p99_tpot_ms') or float('nan'):.2f} ms"
    )
    if acc is not None:
        out += f", acceptance {acc:.1%}"
    if rate is not None:
        out += f", greedy match {rate:.0%}"
    if got.lossless_p_value is not None:
        out += f", sampled-distribution p={got.lossless_p_value:.3g}"
    if primary.get("noisy"):
        out += " (noisy)"
    if got.reused_from is not None:
        out += f" (reused trial {got.reused_from})"
    return out


def _lost(number: int) -> TrialFailed:
    return TrialFailed(
        "interrupted",
        f"trial {number} was declared lost (its heartbeat stopped) while it ran; its retry "
        "measures it, so this result is not stored",
    )


def _retry_of(trial: optuna.Trial) -> int | None:
    """The trial this one runs again (Optuna's retry callback), or None."""
    frozen = trial.study.get_trials(deepcopy=False)[trial.number]
    history = frozen.system_attrs.get("retry_history") or []
    return history[-1] if history else None


class TrialRunner:
    """The objective Optuna calls: one trial per call, for the job ``ctx`` names."""

    def __init__(self, ctx: JobContext, measurer: Measurer, strategy: SearchStrategy) -> None:
        self.ctx, self.measurer, self.strategy = ctx, measurer, strategy
        self.interrupted: list[int] = []  # trials cut short by this worker stopping

    def __call__(self, trial: optuna.Trial) -> list[float]:
        """One trial. A worker stalled (SIGSTOP, a frozen VM) for longer than the stale-after
        time comes back to a trial another worker declared lost and will run again: its
        first write to Optuna is refused, and its row, if it has one, ends ``interrupted``
        (not left running for ever); the job goes on."""
        try:
            return self._call(trial)
        except optuna.exceptions.UpdateFinishedTrialError:
            self.ctx.store.fail_orphaned_trials(
                self.ctx.job_id, [trial.number], detail=_lost(trial.number).detail
            )
            raise _lost(trial.number) from None

    def _call(self, trial: optuna.Trial) -> list[float]:
        ctx, space = self.ctx, self.ctx.space
        if ctx.control.cancelled:
            if ctx.worker.stopping():
                self.interrupted.append(trial.number)  # asked, never run: its retry runs it
            else:
                # The job ended or was cancelled before this trial began: a helper stalled
                # between taking its slot and asking came back after the owner had given
                # that slot back and ended the job (soak job 423). Nothing ran; the record
                # says so, as for a retry the closed search did not run.
                trial.storage.set_trial_system_attr(
                    trial._trial_id, NOT_RUN_ATTR, "its job had ended or was cancelled first"
                )
            raise JobCancelled("job cancelled")
        t0 = time.monotonic()
        params, note = self._candidate(trial)
        cfg = engine_config(params, space)
        ctx.hooks.started(trial.number, params)
        trial_id = ctx.store.add_trial(
            ctx.job_id,
            trial.number,
            method=params["method"],
            params=params,
            engine_config=cfg.to_dict(),
            engine_key=cfg.key(),
            worker_id=ctx.worker.worker_id,
            devices=ctx.worker.devices,
            search=note,
        )
        trial.set_user_attr("spectune_trial_id", trial_id)
        try:
            got = self._run(trial, trial_id, cfg, params)
            primary = got.primary(space)
            cons = constraint_values(primary, space.slo.limits())
            rate, p_value = got.lossless_match_rate, got.lossless_p_value
            if rate is not None and space.lossless.enabled:
                cons["lossless"] = space.lossless.min_match_rate - rate
            if p_value is not None and space.lossless.enabled:
                cons["lossless_distribution"] = space.lossless.alpha - p_value
            for k, v in cons.items():
                trial.set_constraint(k, v)
            values = objective_values(primary, space)
        except TrialFailed as e:
            ctx.store.finish_trial(
                trial_id, TrialState.FAIL, reason=e.reason, detail=e.detail, log_path=e.log_path
            )
            self._emit(trial.number, TrialState.FAIL, params, t0, f"{e.reason}")
            raise
        except Pruned as e:
            self._store(trial, trial_id, params, TrialState.PRUNED, e.measured)
            ctx.store.finish_trial(trial_id, TrialState.PRUNED, reason="pruned", detail=e.evidence)
            self._emit(trial.number, TrialState.PRUNED, params, t0, e.evidence)
            raise optuna.TrialPruned(e.evidence) from None
        except BaseException as e:  # interrupted: keep the record honest
            user = isinstance(e, JobCancelled) and not ctx.worker.stopping()
            lost = isinstance(e, optuna.exceptions.UpdateFinishedTrialError)
            if not user and not lost:  # a lost trial's retry is queued by who declared it
                self.interrupted.append(trial.number)
            reason = "cancelled" if user else "interrupted"
            ctx.store.finish_trial(trial_id, TrialState.FAIL, reason=reason, detail=repr(e))
            raise
        self._store(trial, trial_id, params, TrialState.COMPLETE, got)
        self._emit(trial.number, TrialState.COMPLETE, params, t0, _summary(primary, got))
        return values

    def _store(
        self,
        trial: optuna.Trial,
        trial_id: int,
        params: dict[str, Any],
        state: TrialState,
        got: Measured,
    ) -> None:
        """Store the result once, then tell the integrations; a trial another worker
        declared lost meanwhile stores nothing (its retry measures it).

        A worker stalled (SIGSTOP, a frozen VM) just after its result was stored comes back
        to an Optuna trial another worker has failed as stale: its result stands, read as
        measured, and the retry that worker queued tells Optuna its values with no launch
        (``_reuse``); the job goes on, without the Optuna attributes the integrations add."""
        if not self.ctx.store.store_results(trial_id, got.points, got.stored_extra(), state=state):
            raise _lost(trial.number) from None
        try:
            on_trial_stored(self.ctx, trial, params, state, got)
        except optuna.exceptions.UpdateFinishedTrialError:
            log.warning(
                "job %s: trial %s: result stored; another worker had declared it lost "
                "meanwhile, so Optuna keeps it failed and the stored result stands",
                self.ctx.job_id,
                trial.number,
            )

    def _candidate(self, trial: optuna.Trial) -> tuple[dict[str, Any], dict[str, Any]]:
        """The configuration to launch (its class's member) and how it was proposed."""
        proposed = sample_candidate(trial, self.ctx.space)
        params, why = self.strategy.canonical(proposed)
        note = dict(trial.user_attrs.get(GUIDE_ATTR) or {"by": "sampler"})
        if not note.get("predicted") and (pred := self.strategy.prediction_for(params)):
            note["predicted"] = pred  # priced before the launch, whoever proposed it
        if offline := self.strategy.offline_for(params):
            note["offline"] = offline
        if why:
            changed = {k: v for k, v in proposed.items() if params.get(k) != v}
            note["class"] = {"proposed": changed, "why": why}
        return params, note

    def _emit(self, number: int, state: str, params: dict, t0: float, summary: str) -> None:
        seconds = time.monotonic() - t0
        self.ctx.hooks.ended(
            TrialEvent(
                number, self.ctx.n_trials, state, params["method"], params, seconds, summary
            )
        )

    def _reuse(
        self, trial: optuna.Trial, cfg: EngineConfig, params: dict[str, Any]
    ) -> Measured | None:
        """The same engine configuration was already measured in this job: reuse it, no
        launch, and steer the next trial to an unmeasured neighbour instead of a repeat."""
        retried = _retry_of(trial)
        prev = self.ctx.store.previous_run(
            self.ctx.job_id, cfg.key(), trial.number, retried=retried
        )
        if prev is None:
            return None
        if retried != prev.number:  # not a retry telling Optuna a stored result
            self.strategy.enqueue_neighbour(trial, params)
        ms = [dict(m.metrics) for m in prev.measurements]
        if prev.state == TrialState.PRUNED:
            raise Pruned(
                f"same configuration as trial {prev.number}, pruned: {prev.fail_detail}",
                Measured(ms, reused_from=prev.number),
            )
        if prev.state == TrialState.FAIL:
            raise TrialFailed(
                prev.fail_reason or "crash",
                f"same configuration as trial {prev.number}, which failed: "
                + (prev.fail_detail or ""),
            )
        return Measured(
            ms,
            reused_from=prev.number,
            kv_cache_tokens=prev.kv_cache_tokens,
            peak_rss_mb=prev.peak_rss_mb,
            lossless_match_rate=prev.lossless_match_rate,
            lossless_p_value=prev.lossless_p_value,
        )

    def _lossless(
        self, cfg: EngineConfig, ids: list[list[int] | None], samples: Samples | None
    ) -> tuple[float | None, float | None]:
        """Agreement with the baseline's greedy outputs, and the p-value of the sampled
        continuations against the baseline's (None: no speculation, no baseline measured
        yet, or no sampled workload)."""
        if cfg.speculative_config is None:
            return None, None
        store, job = self.ctx.store, self.ctx.job_id
        ref = store.baseline_greedy(job, cfg.model)
        rate = lossless_match(ref, ids) if ref is not None else None
        ref_samples = store.baseline_samples(job, cfg.model) if samples is not None else None
        p_value = None
        if samples is not None and ref_samples is not None:
            p_value = distribution_p_value(ref_samples, samples, seed=self.ctx.space.seed)
        return rate, p_value

    def _run(
        self, trial: optuna.Trial, trial_id: int, cfg: EngineConfig, params: dict[str, Any]
    ) -> Measured:
        reused = self._reuse(trial, cfg, params)
        if reused is not None:
            return reused
        if notes := self.measurer.check(cfg):
            # What pre-flight could not check (a hub model not on this machine), with the
            # trial: a failure at launch then reads with its cause.
            self.ctx.store.add_trial_note(trial_id, "preflight", notes)
        space = self.ctx.space
        prune = None
        if space.measurement.prune and cfg.speculative_config is not None:
            prune = functools.partial(self.strategy.prune_check, model=cfg.model)
        lossless = None
        if space.lossless.enabled:
            lossless = functools.partial(self._lossless, cfg)
        log_path = self.ctx.log_dir / f"trial-{trial.number}.log"
        return self.measurer.measure(cfg, params, log_path, prune=prune, lossless=lossless)
