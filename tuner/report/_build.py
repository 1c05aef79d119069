"""A job's report: which slice of its results a query names, the front over it at every
level, the round cost of every speculative trial, and why the winner won. The API answers it
(``GET /api/jobs/{id}/pareto``) and the CLI prints it (``spectune report --json``); a query
naming what the job did not measure is ``InvalidInput`` naming the query field."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tuner.baselines import queued
from tuner.errors import InvalidInput
from tuner.explain import explain
from tuner.export import winner_exports
from tuner.launch_history import history_text
from tuner.launches import LaunchSpread, launch_count, log_cv
from tuner.pareto import Point, Reference, Report, job_report
from tuner.report._models import (
    HostedReference,
    LaunchSpreadPublic,
    ParetoPoint,
    ParetoPublic,
    RoundCostTrial,
    RoundCostVerdict,
    WinnerExport,
)
from tuner.space import SearchSpace, running_batch
from tuner.storage import Store
from tuner.surface import surface_is_simulated

__all__ = ["ReportQuery", "Slice", "pareto", "report", "resolve_query"]


@dataclass(frozen=True)
class ReportQuery:
    """Which slice of the results: workload, concurrency level, SLO overrides, target."""

    workload: str | None
    concurrency: int | None
    slo: dict[str, float] = field(default_factory=dict)
    target: str | None = None


@dataclass(frozen=True)
class Slice:
    """A query resolved against the job's space: the workload, the level and the SLO."""

    workload: str
    concurrency: int
    slo: dict[str, float]


def resolve_query(space: SearchSpace, q: ReportQuery) -> Slice:
    """The job's defaults for what the query leaves out; InvalidInput for what it did not
    measure."""
    names = [w.name for w in space.all_workloads]
    wl = q.workload or space.primary_workload
    if wl not in names:
        raise InvalidInput.field(
            ("query", "workload"),
            f"this job measured workload {', '.join(map(repr, names))}, not {wl!r}",
        )
    conc = q.concurrency or space.primary_concurrency
    if conc not in space.concurrency:
        raise InvalidInput.field(
            ("query", "concurrency"),
            f"this job measured concurrency {space.concurrency}, not {conc}",
        )
    return Slice(wl, conc, {**space.slo.limits(), **q.slo})


def report(store: Store, job_id: int, q: ReportQuery, sl: Slice, concurrency: int) -> Report:
    """The front at one level of the slice; InvalidInput for a target the job did not
    measure."""
    try:
        return job_report(
            store,
            job_id,
            workload=sl.workload,
            concurrency=concurrency,
            slo=sl.slo,
            target=q.target,
        )
    except ValueError as e:
        raise InvalidInput.field(("query", "target"), str(e)) from None


def _ci95(rep: Report, p: Point, name: str) -> tuple[float | None, float | None, str | None]:
    """The report's 95% interval of ``p``'s ``name`` and what it covers (``Report.interval``:
    over launches with the job's spread, else one launch's repeats; None: neither). A
    t-interval over 2-3 repeats can reach below 0 for a quantity that cannot: answered 0."""
    got = rep.interval(p, name)
    if got is None:
        return None, None, None
    return max(0.0, got[0]), got[1], got[2]


def _pareto_point(p: Point, rep: Report, level: int, conc: int, front: set[int]) -> ParetoPoint:
    m = p.metrics
    tps_lo, tps_hi, kind = _ci95(rep, p, "output_tok_per_s")
    tpot_lo, tpot_hi, _ = _ci95(rep, p, "p99_tpot_ms")
    search = m.get("search") or {}
    seqs = p.params.get("max_num_seqs")
    return ParetoPoint(
        trial_number=p.trial_number,
        method=p.method,
        params=p.params,
        concurrency=level,
        output_tok_per_s=m["output_tok_per_s"],
        p99_tpot_ms=m.get("p99_tpot_ms"),
        p99_ttft_ms=m.get("p99_ttft_ms"),
        p99_e2e_ms=m.get("p99_e2e_ms"),
        acceptance_rate=m.get("acceptance_rate"),
        mean_acceptance_length=m.get("mean_acceptance_length"),
        feasible=p.feasible,
        violations=list(p.violations),
        on_front=p.trial_number in front,
        is_baseline=p.method == "none",
        is_winner=level == conc
        and rep.winner is not None
        and p.trial_number == rep.winner.trial_number,
        speedup=rep.speedup(p),
        verdict=v.state if (v := rep.verdict(p)) is not None else None,
        output_tok_per_s_ci95_low=tps_lo,
        output_tok_per_s_ci95_high=tps_hi,
        p99_tpot_ms_ci95_low=tpot_lo,
        p99_tpot_ms_ci95_high=tpot_hi,
        interval_kind=kind,
        launches=launch_count(m),
        repeats=m.get("repeats"),
        confirmed=bool(m.get("confirmed")),
        warmup_capped=bool(m.get("warmup_capped")),
        search_output_tok_per_s=search.get("output_tok_per_s") if m.get("confirmed") else None,
        noisy=bool(m.get("noisy")),
        multi_token_chunks=bool(m.get("multi_token_chunks")),
        relative_mad=m.get("relative_mad"),
        lossless_match_rate=p.lossless_match_rate,
        kv_cache_tokens=p.kv_cache_tokens,
        peak_rss_mb=p.peak_rss_mb,
        mean_ttft_ms=m.get("mean_ttft_ms"),
        mean_e2e_ms=m.get("mean_e2e_ms"),
        mean_queue_ms=m.get("mean_queue_ms"),
        running_batch=running_batch(seqs, level) if seqs else None,
        queued=queued(m, seqs),
        baseline_trial=None if p.method == "none" else rep.baselines.for_trial(p.trial_number),
    )


def _round_cost(
    rep: Report, configs: dict[int, tuple[str, dict[str, Any]]]
) -> list[RoundCostTrial]:
    out = []
    for number, vs in sorted(rep.verdicts.items()):
        method, params = configs.get(number, ("?", {}))
        out.append(
            RoundCostTrial(
                trial_number=number,
                method=method,
                params=params,
                verdicts=[
                    RoundCostVerdict(
                        concurrency=v.concurrency,
                        spec_ms_per_token=v.spec_ms_per_token,
                        baseline_ms_per_token=v.baseline_ms_per_token,
                        pays_off=v.pays_off,
                        margin_pct=v.margin_pct,
                        state=v.state,
                        speedup=v.speedup,
                        speedup_ci95_low=v.speedup_ci95[0],
                        speedup_ci95_high=hi if math.isfinite(hi := v.speedup_ci95[1]) else None,
                        interval_kind=v.interval_kind,
                        same_running_batch=rep.baselines.same_batch(number, v.concurrency),
                    )
                    for v in vs
                ],
                crossover_concurrency=rep.crossover.get(number),
                baseline_trial=rep.baselines.for_trial(number),
            )
        )
    return out


def _reference(r: Reference, rep: Report) -> HostedReference:
    m = r.metrics or {}
    base = rep.baseline.metrics.get("output_tok_per_s") if rep.baseline else None
    tps = m.get("output_tok_per_s")
    return HostedReference(
        name=r.name,
        base_url=r.base_url,
        model=r.model,
        output_tok_per_s=tps,
        p99_tpot_ms=m.get("p99_tpot_ms"),
        p99_ttft_ms=m.get("p99_ttft_ms"),
        speedup_vs_baseline=(tps / base) if tps and base else None,
        feasible=r.feasible,
        violations=list(r.violations),
        error=r.error,
    )


def _spread_row(level: int, name: str, sp: LaunchSpread) -> LaunchSpreadPublic:
    h = sp.history
    return LaunchSpreadPublic(
        concurrency=level,
        metric=name,
        cv=sp.cv,
        log_sd=sp.log_sd,
        df=sp.df,
        configurations=sp.configurations,
        own_df=sp.own_df,
        own_cv=None if sp.own_log_sd is None else log_cv(sp.own_log_sd),
        history_jobs=sp.history_jobs,
        history_df=sp.history_df,
        history_available_df=None if h is None else h.df,
        history_cv=None if h is None else h.cv,
        history_pooled=sp.history_df > 0,
        history_p_value=sp.history_p,
        source=history_text(sp),
    )


def pareto(store: Store, job_id: int, q: ReportQuery) -> ParetoPublic:
    """The whole report as one document: one point per (configuration, level), the winner
    and verdicts at the query's level. JobNotFound for an unknown job. A job whose stored
    space today's rules refuse reads with defaults for those fields and exports nothing."""
    space = store.space(job_id, for_reading=True)
    refused = store.space_refusal(job_id)
    sl = resolve_query(space, q)
    points: list[ParetoPoint] = []
    configs: dict[int, tuple[str, dict[str, Any]]] = {}
    main: Report | None = None
    spread_rows: list[LaunchSpreadPublic] = []
    for level in space.concurrency:
        rep = report(store, job_id, q, sl, level)
        front = {p.trial_number for p in rep.front}
        if level == sl.concurrency:
            main = rep
        spread_rows += [_spread_row(level, name, sp) for name, sp in rep.spreads.items()]
        for p in (*rep.points, *rep.pruned):
            configs.setdefault(p.trial_number, (p.method, p.params))
            points.append(_pareto_point(p, rep, level, sl.concurrency, front))
    assert main is not None  # the slice's level is one of the space's (resolve_query)
    equivalent = main.equivalent_to_winner
    exports = winner_exports(main)
    if refused is not None:  # read with defaults: an export would not be what was measured
        exports = dict.fromkeys(exports, refused)
    return ParetoPublic(
        job_id=job_id,
        workload=sl.workload,
        sampling=main.sampling,
        endpoint=main.endpoint,
        prompt_tokens_mean=main.prompt_tokens_mean,
        concurrency=sl.concurrency,
        levels=list(space.concurrency),
        slo=sl.slo,
        objectives=[
            {"metric": o.metric, "direction": o.resolved_direction} for o in space.objectives
        ],
        points=points,
        baseline_trial=main.baseline.trial_number if main.baseline else None,
        baseline_trials=main.baselines.all,
        latency_decides=main.latency_decides,
        winner_trial=main.winner.trial_number if main.winner else None,
        winner_confirmed=main.winner_confirmed,
        stop_reason=store.job(job_id).stop_reason,
        equivalent_to_winner=[dict(p.params) for p in equivalent],
        equivalent_trials=[p.trial_number for p in equivalent],
        launch_spread=spread_rows,
        round_cost=_round_cost(main, configs),
        why=explain(main),
        replay_surface=main.replay_surface,
        replay_simulated=bool(main.replay_surface and surface_is_simulated(main.replay_surface)),
        target=main.target,
        other_targets=list(main.other_targets),
        references=[_reference(r, main) for r in main.references],
        winner_exports=[
            WinnerExport(name=name, available=reason is None, reason=reason)
            for name, reason in exports.items()
        ],
    )
