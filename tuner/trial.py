"""One trial: sample a candidate, reuse an earlier run of the same engine configuration or
measure it (launch or replay), store what it measured, and report it to Optuna.

Data flow: sample (define-by-run) -> engine config -> reuse? -> pre-flight -> measure every
point (objective point first; pruning may stop there) -> lossless check -> store ->
objective values and SLO constraints to Optuna.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from tuner.candidates import engine_config, sample_candidate
from tuner.engines import EngineConfig
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
from tuner.search import SearchStrategy
from tuner.space import SearchSpace
from tuner.storage import Store

__all__ = ["TrialEvent", "TrialRunner"]


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
    ) -> None:
        self.store, self.job_id, self.space = store, job_id, space
        self.measurer, self.strategy, self.control = measurer, strategy, control
        self.log_dir, self.n_trials = log_dir, n_trials
        self.on_trial, self.on_start = on_trial, on_start

    def __call__(self, trial: optuna.Trial) -> list[float]:
        if self.control.cancelled:
            raise JobCancelled("job cancelled")
        t0 = time.monotonic()
        params = sample_candidate(trial, self.space)
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
            self.store.store_results(trial_id, e.measurements, e.extra, state="pruned")
            self.store.finish_trial(trial_id, "pruned", reason="pruned", detail=e.evidence)
            self._emit(trial.number, "pruned", params, t0, e.evidence)
            raise optuna.TrialPruned(e.evidence) from None
        except BaseException as e:  # interrupted: keep the record honest
            reason = "cancelled" if isinstance(e, JobCancelled) else "interrupted"
            self.store.finish_trial(trial_id, "fail", reason=reason, detail=repr(e))
            raise
        self.store.store_results(trial_id, measurements, extra, state="complete")
        self._emit(trial.number, "complete", params, t0, _summary(primary, extra))
        return values

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
