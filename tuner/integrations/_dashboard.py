"""What optuna-dashboard needs to show a SpecTune study as SpecTune means it.

Why: the dashboard reads Optuna's storage directly. Without this it labels the objectives
"Objective 0/1", plots the noise-adjusted scores the sampler sees as if they were the
measured medians, shows none of the measured metrics, treats a trial that reuses an earlier
one's launch as a new measurement, and -- because Optuna 5 writes each constraint under its
own ``constraints:<name>`` system attr while optuna-dashboard 0.21 reads the list under
``constraints`` -- shows SLO-violating trials as feasible.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import optuna

from tuner.launches import launch_count
from tuner.pareto import Report, feasible, lossless_rules
from tuner.space import SearchSpace
from tuner.storage import named_constraints

__all__ = [
    "DASHBOARD_CONSTRAINTS_KEY",
    "MEASURED_METRICS",
    "label_study",
    "metric_names",
    "trial_attrs",
    "write_dashboard_attrs",
    "write_job_summary",
]

# optuna_dashboard._serializer.CONSTRAINTS_KEY (0.21): a list, feasible when every value <= 0.
DASHBOARD_CONSTRAINTS_KEY = "constraints"
# Measured metrics copied to user attrs (medians, as SpecTune's tables show them).
MEASURED_METRICS = (
    "output_tok_per_s",
    "requests_per_s",
    "goodput_req_per_s",
    "p50_tpot_ms",
    "p99_tpot_ms",
    "mean_tpot_ms",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_e2e_ms",
    "p99_e2e_ms",
    "p99_itl_ms",
    "acceptance_rate",
    "mean_acceptance_length",
)


def metric_names(space: SearchSpace) -> list[str]:
    """The objective values Optuna stores are noise-adjusted scores (median moved against
    the trial by the MAD penalty), so the names say so; the medians are user attrs."""
    return [f"{o.metric} score" for o in space.objectives]


def label_study(study: optuna.Study, space: SearchSpace) -> None:
    """Name the objectives (idempotent: also run on resume, for studies made before this)."""
    names = metric_names(space)
    if study.metric_names != names:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2; what we need
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)
    if study.user_attrs.get("spectune") != space.name:
        study.set_user_attr("spectune", space.name)


def _primary(measurements: Sequence[dict[str, Any]], space: SearchSpace) -> dict[str, Any]:
    key = (space.primary_workload, space.primary_concurrency)
    return next((m for m in measurements if (m["workload"], m["concurrency"]) == key), {})


def trial_attrs(
    measurements: Sequence[dict[str, Any]], extra: dict[str, Any], space: SearchSpace
) -> dict[str, Any]:
    """User attrs of one trial at the job's objective point: medians, their 95% intervals,
    acceptance, reuse and SpecTune's own feasibility verdict (``tuner.pareto.feasible``)."""
    m = _primary(measurements, space)
    out: dict[str, Any] = {
        "workload": space.primary_workload,
        "concurrency": space.primary_concurrency,
    }
    if not m:
        return out
    stats = m.get("stats") or {}
    for name in MEASURED_METRICS:
        if m.get(name) is not None:
            out[name] = m[name]
        st = stats.get(name)
        if st is not None and st.get("ci95_low") is not None:
            out[f"{name}_ci95"] = [st["ci95_low"], st["ci95_high"]]
    rate = extra.get("lossless_match_rate")
    p_value = extra.get("lossless_p_value")
    ok, why = feasible(
        m,
        space.slo.limits(),
        lossless_match_rate=rate,
        lossless_p_value=p_value,
        **lossless_rules(space),
    )
    out["feasible"] = ok
    out["violations"] = list(why)
    if rate is not None:
        out["lossless_match_rate"] = rate
    if p_value is not None:
        out["lossless_p_value"] = p_value
    if extra.get("reused_from") is not None:
        out["reuses_trial"] = extra["reused_from"]  # no launch: trial N's numbers again
    if m.get("noisy"):
        out["noisy"] = True
    if m.get("replay"):
        out["replay"] = m["replay"]  # from a recorded surface, not measured in this job
    return out


def write_dashboard_attrs(
    trial: optuna.Trial,
    measurements: Sequence[dict[str, Any]],
    extra: dict[str, Any],
    space: SearchSpace,
) -> None:
    """Store ``trial_attrs`` as user attrs and the named constraints once more as the list
    optuna-dashboard reads (same values, in name order; their names in a user attr)."""
    for k, v in trial_attrs(measurements, extra, space).items():
        trial.set_user_attr(k, v)
    named = named_constraints(trial.storage.get_trial(trial._trial_id).system_attrs)
    names = sorted(named)
    if names:
        trial.set_user_attr("constraint_names", names)
        values = [_finite(float(named[k])) for k in names]
        trial.storage.set_trial_system_attr(trial._trial_id, DASHBOARD_CONSTRAINTS_KEY, values)


def _finite(v: float) -> float:
    """An unmeasurable metric is an infinite violation; the dashboard's JSON has no Infinity."""
    return v if math.isfinite(v) else math.copysign(1e300, v)


def write_job_summary(study: optuna.Study, rep: Report) -> None:
    """At the job's end, on the study (a finished trial takes no more attributes): the
    winner and the numbers of the confirmed trials combined over their launches (what
    SpecTune's report ranks), so a reader of the dashboard sees what the export rests on.
    Kept to the objectives and a few headline metrics: the dashboard cuts a long value."""
    keys = dict.fromkeys(["output_tok_per_s", "p99_tpot_ms", *(m for m, _ in rep.objectives)])
    confirmed = {}
    for p in [*rep.points, *rep.pruned]:
        if p.metrics.get("confirmed"):
            row = {k: p.metrics.get(k) for k in keys if p.metrics.get(k) is not None}
            confirmed[str(p.trial_number)] = {
                **row,
                "launches": launch_count(p.metrics),
                "feasible": p.feasible,
                "violations": list(p.violations),
            }
    study.set_user_attr("confirmed", confirmed)
    study.set_user_attr("winner_trial", rep.winner.trial_number if rep.winner else None)
