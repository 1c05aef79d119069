"""The measurement protocol: repeats, re-measure when noisy, the lossless check, and what a
point means to Optuna (objective values and constraints).

A point is (configuration, workload, concurrency). ``measure_point`` measures one ``repeats``
times on a running server and aggregates them (median, MAD, 95% interval, noise-aware score);
``measure_all`` measures every point of a space on one launch, the objective point first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tuner.loadgen import LoadError, measure
from tuner.measure._control import Pruned, TrialFailed
from tuner.measure._measured import Measured
from tuner.metrics import Measurement
from tuner.space import SearchSpace, WorkloadSpec
from tuner.stats import aggregate, noise_score, relative_mad
from tuner.workloads import Prompt, builtin_path, load_prompts

__all__ = [
    "MAX_FAILED_FRACTION",
    "Server",
    "constraint_values",
    "greedy_outputs",
    "load_all_prompts",
    "lossless_match",
    "measure_all",
    "measure_point",
    "objective_values",
    "point_order",
]

MAX_FAILED_FRACTION = 0.0  # any failed request makes a point infeasible: its numbers lie


class Server(Protocol):
    """What the protocol needs of a running engine (``tuner.engines.ServerProcess``) or of a
    hosted endpoint: where it answers, the headers to send, and its probe."""

    base_url: str
    headers: dict[str, str] | None
    probe: Any

    def alive(self) -> bool: ...

    def log_tail(self, max_bytes: int = ...) -> str: ...


def load_all_prompts(space: SearchSpace) -> dict[str, list[Prompt]]:
    out = {}
    for wl in space.all_workloads:
        path = builtin_path(wl.builtin) if wl.builtin else Path(space.resolve(wl.path or ""))
        out[wl.name] = load_prompts(path, wl.format)
    return out


def point_order(space: SearchSpace) -> list[tuple[str, int]]:
    """Every (workload, concurrency) of the space, the objective point first."""
    first = (space.primary_workload, space.primary_concurrency)
    return [first] + [
        (wl.name, level)
        for wl in space.all_workloads
        for level in space.concurrency
        if (wl.name, level) != first
    ]


def _objective_noise(agg: dict[str, Any], space: SearchSpace) -> float:
    """Largest relative MAD among the objective metrics (the ones a decision rests on)."""
    rel = 0.0
    for o in space.objectives:
        st = agg["stats"].get(o.metric)
        if st is not None:
            rel = max(rel, relative_mad(st))
    return rel


def measure_point(
    server: Server, space: SearchSpace, wl: WorkloadSpec, prompts: list[Prompt], level: int
) -> dict[str, Any]:
    """N repeats at one (workload, level); a too-noisy set is thrown away and measured again."""
    ms = space.measurement
    remeasured = 0
    while True:
        runs: list[Measurement] = []
        resets = 0
        for r in range(ms.repeats):
            if ms.reset_prefix_cache:
                resets += asyncio.run(server.probe.reset_prefix_cache(server.base_url))
            runs.append(
                asyncio.run(
                    measure(
                        server.base_url,
                        space.engine.served_model_name,
                        prompts,
                        workload=wl.name,
                        concurrency=level,
                        num_requests=max(wl.num_prompts, level),
                        max_tokens=wl.max_tokens,
                        warmup_requests=wl.warmup_requests if r == 0 else 0,
                        timeout_s=wl.request_timeout_s,
                        slo=space.slo.limits(),
                        request_rate=wl.request_rate,
                        seed=space.seed + r,
                        probe=server.probe,
                        headers=server.headers,
                    )
                )
            )
            if not server.alive():
                raise TrialFailed("crash", "engine died during measurement\n" + server.log_tail())
            last = runs[-1]
            if last.num_requests and last.num_failed == last.num_requests:
                # A wedged engine: stop it now rather than time out every repeat and level
                # (the measurer fails the trial; a hosted reference keeps it as its error).
                raise LoadError(
                    f"every request failed at concurrency {level}: {'; '.join(last.errors)}"
                )
        agg = aggregate(runs, remeasured=remeasured)
        noise = _objective_noise(agg, space)
        if noise <= ms.max_relative_mad or remeasured >= ms.remeasure:
            break
        remeasured += 1
    agg["relative_mad"] = noise
    agg["noisy"] = noise > ms.max_relative_mad
    agg["prefix_cache_resets"] = resets
    agg["arrival"] = wl.arrival
    agg["score"] = {
        o.metric: noise_score(agg["stats"][o.metric], o.resolved_direction, ms.noise_penalty)
        for o in space.objectives
        if o.metric in agg["stats"]
    }
    return agg


def measure_all(
    server: Server,
    space: SearchSpace,
    prompts: dict[str, list[Prompt]],
    after_primary: Callable[[dict[str, Any]], str | None] | None = None,
) -> list[dict[str, Any]]:
    """Every workload x every concurrency level on one running engine (no restart). The
    objective point is measured first: ``after_primary`` may stop the rest (pruning)."""
    wls = {wl.name: wl for wl in space.all_workloads}
    out = []
    for name, level in point_order(space):
        out.append(measure_point(server, space, wls[name], prompts[name], level))
        if len(out) == 1 and after_primary is not None:
            evidence = after_primary(out[0])
            if evidence is not None:
                raise Pruned(evidence, Measured(out))
    return out


def greedy_outputs(
    server: Server, space: SearchSpace, prompts: dict[str, list[Prompt]]
) -> list[list[int] | None]:
    """Greedy token ids of the lossless check's fixed prompt set."""
    ll = space.lossless
    first = space.all_workloads[0].name
    texts = [p.prompt for p in prompts[first][: ll.num_prompts]]
    return asyncio.run(
        server.probe.greedy_token_ids(
            server.base_url,
            space.engine.served_model_name,
            texts,
            ll.max_tokens,
            timeout_s=space.all_workloads[0].request_timeout_s,
            headers=server.headers,
        )
    )


def lossless_match(reference: list[Any], outputs: list[Any]) -> float | None:
    """Token-level agreement with the baseline's greedy outputs: for each prompt, the length
    of the common prefix over the reference length (after a first difference, greedy
    decoding follows another path, so later tokens cannot be compared)."""
    total = same = 0
    for ref, out in zip(reference, outputs, strict=False):
        if ref is None or out is None:
            continue
        total += len(ref)
        for a, b in zip(ref, out, strict=False):
            if a != b:
                break
            same += 1
    return same / total if total else None


def constraint_values(m: dict[str, Any], slo: dict[str, float]) -> dict[str, float]:
    """Optuna constraints (<= 0 is feasible): each SLO limit, no failed requests, not noisy."""
    values: dict[str, float] = {}
    for metric, limit in slo.items():
        v = m.get(metric)
        values[metric] = float("inf") if v is None else float(v) - float(limit)
    frac = m["num_failed"] / m["num_requests"] if m["num_requests"] else 1.0
    values["failed_requests"] = frac - MAX_FAILED_FRACTION
    values["noisy"] = 1.0 if m.get("noisy") else 0.0
    return values


def objective_values(m: dict[str, Any], space: SearchSpace) -> list[float]:
    """Noise-aware scores (median moved against us by the MAD penalty) when repeated."""
    vals = []
    for o in space.objectives:
        v = (m.get("score") or {}).get(o.metric, m.get(o.metric))
        if v is None:
            raise TrialFailed("no_data", f"{o.metric} could not be measured")
        vals.append(float(v))
    return vals
