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
from tuner.measure._distribution import Samples, sample_seed
from tuner.measure._host import HostLoad
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
    "repeat_passes",
    "sampled_outputs",
    "warm_up",
]

MAX_FAILED_FRACTION = 0.0  # any failed request makes a point infeasible: its numbers lie
# Draws of each prompt a sampled baseline is priced on: one draw's price moved by more than
# its own error between draw sets on the tiny pair; four halve the error for a few more
# requests of a launch already paid for (the price states its error: acceptance_rate_se).
SAMPLED_DRAWS = 4


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
        out[wl.name] = load_prompts(path, wl.read_as, chat=wl.chat, max_turns=wl.max_turns)
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


def _window(
    server: Server,
    space: SearchSpace,
    wl: WorkloadSpec,
    prompts: list[Prompt],
    level: int,
    *,
    num_requests: int,
    warmup_requests: int = 0,
    seed: int = 0,
    passes: int = 1,
) -> tuple[Measurement, bool]:
    """One measured window of ``num_requests`` at ``level`` (a repeat or a warm-up window),
    from an empty prefix cache when the space asks for it; and whether the cache was reset."""
    reset = False
    if space.measurement.reset_prefix_cache:
        reset = bool(asyncio.run(server.probe.reset_prefix_cache(server.base_url)))
    m = asyncio.run(
        measure(
            server.base_url,
            space.engine.served_model_name,
            prompts,
            workload=wl.name,
            concurrency=level,
            num_requests=num_requests,
            max_tokens=wl.max_tokens,
            warmup_requests=warmup_requests,
            timeout_s=wl.request_timeout_s,
            slo=space.slo.limits(),
            request_rate=wl.request_rate,
            seed=seed,
            probe=server.probe,
            headers=server.headers,
            passes=passes,
            reset_between_passes=space.measurement.reset_prefix_cache,
            sampling=wl.sampling.request(),
            chat_extra=chat_extra(wl),
        )
    )
    return m, reset


def chat_extra(wl: WorkloadSpec) -> dict[str, Any]:
    """Fields a chat request of ``wl`` carries besides its messages and sampling."""
    kw = wl.chat_template_kwargs
    return {"chat_template_kwargs": dict(kw)} if kw else {}


def warm_up(
    server: Server, space: SearchSpace, wl: WorkloadSpec, prompts: list[Prompt], level: int
) -> dict[str, Any]:
    """Bring the engine to steady state at ``level`` before its repeats are measured.

    Why: a fresh engine's first requests run 30-55 % slower than later ones (first-request
    TTFT 108 ms against 12-15 ms steady, issue 21), and two fixed warm-up requests did not
    cover it. The workload's warm-up requests go first; with ``warmup: steady`` windows of
    max(4, 2 x level) requests follow until two in a row agree on output tok/s within
    ``warmup_tolerance``, or ``max_warmup_windows`` is reached (``capped``: the point is
    measured anyway and says so). Returns the windows sent, whether the cap was hit, and the
    last window's rate in requests per second (what sizes a repeat by time)."""
    ms = space.measurement
    rate: float | None = None
    if wl.warmup_requests:
        first, _ = _window(server, space, wl, prompts, level, num_requests=wl.warmup_requests)
        rate = first.requests_per_s or None
    if ms.warmup != "steady":
        return {"warmup_windows": 0, "warmup_capped": False, "rate_req_per_s": rate}
    size = max(4, 2 * level)
    prev: float | None = None
    for i in range(ms.max_warmup_windows):
        m, _ = _window(server, space, wl, prompts, level, num_requests=size, seed=space.seed + i)
        if m.num_requests and m.num_failed == m.num_requests:  # wedged: do not wait out the cap
            raise LoadError(
                f"every request failed in a warm-up window at concurrency {level}: {m.errors}"
            )
        rate = m.requests_per_s or rate
        tps = m.output_tok_per_s
        if prev and tps and abs(tps - prev) <= ms.warmup_tolerance * max(tps, prev):
            return {"warmup_windows": i + 1, "warmup_capped": False, "rate_req_per_s": rate}
        prev = tps
    return {"warmup_windows": ms.max_warmup_windows, "warmup_capped": True, "rate_req_per_s": rate}


def repeat_passes(
    space: SearchSpace, wl: WorkloadSpec, level: int, rate: float | None, turns: float = 1.0
) -> int:
    """Passes in one repeat: 1, or, with ``repeat_s``, as many passes over the workload's
    num_prompts requests as fill that many seconds at the warm-up's rate (at least 1).

    Why by time: a repeat of 12 short requests lasts 1-3 s on the tiny default, so one slow
    second moves it. Why whole passes over the same prompts, each from an empty prefix cache:
    more requests taken further down the file would give a faster configuration another
    prompt mix than a slower one (and repeated prompts a prefix-cache hit), so the comparison
    would no longer be on one workload."""
    seconds = space.measurement.repeat_s
    if seconds is None or not rate:
        return 1
    per_pass = max(wl.num_prompts, level) * max(1.0, turns)  # requests: a turn is one
    return max(1, round(rate * seconds / per_pass))


def measure_point(
    server: Server, space: SearchSpace, wl: WorkloadSpec, prompts: list[Prompt], level: int
) -> dict[str, Any]:
    """Warm up to steady state, then N repeats at one (workload, level); a too-noisy set is
    thrown away and measured again."""
    ms = space.measurement
    remeasured = 0
    warm = warm_up(server, space, wl, prompts, level)
    turns = sum(p.turns for p in prompts) / len(prompts) if prompts else 1.0
    passes = repeat_passes(space, wl, level, warm["rate_req_per_s"], turns)
    host = HostLoad(getattr(server, "cpu_s", None))
    while True:
        runs: list[Measurement] = []
        resets = 0
        for r in range(ms.repeats):
            m, reset = _window(
                server,
                space,
                wl,
                prompts,
                level,
                num_requests=max(wl.num_prompts, level),
                seed=space.seed + r,
                passes=passes,
            )
            runs.append(m)
            resets += reset
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
    share = host.other_share()
    if share is not None:
        agg["host_other_cpu_share"] = round(share, 4)
        if ms.max_host_load is not None and share > ms.max_host_load:
            agg["noisy"] = agg["host_disturbed"] = True
    agg["prefix_cache_resets"] = resets
    agg["warmup_windows"] = warm["warmup_windows"]
    agg["warmup_capped"] = warm["warmup_capped"]
    agg["passes_per_repeat"] = passes
    agg["arrival"] = wl.arrival
    agg["sampling"] = wl.sampling.request()
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
    """Greedy token ids of the lossless check's fixed prompt set: the first workload's first
    prompts as it sends them (a conversation's first turn, through the chat template)."""
    ll = space.lossless
    wl = space.all_workloads[0]
    return asyncio.run(
        server.probe.greedy_token_ids(
            server.base_url,
            space.engine.served_model_name,
            prompts[wl.name][: ll.num_prompts],
            ll.max_tokens,
            timeout_s=wl.request_timeout_s,
            headers=server.headers,
            extra=chat_extra(wl),
        )
    )


def token_sequences(
    server: Server, space: SearchSpace, prompts: dict[str, list[Prompt]], concurrency: int = 1
) -> list[list[list[int]]] | None:
    """The baseline's prompt and output ids of the first workload's requests, one pass
    (``[prompt ids, output ids, [the request's max_tokens]]`` each; every turn of a
    conversation, templated by the engine), the output the space's largest depth past
    ``max_tokens`` (the last round's drafts are judged too): what every proposer is priced
    on offline. Greedy, or under the workload's own sampling settings when it samples (its
    own seed aside: the probe seeds each prompt), ``SAMPLED_DRAWS`` draws of each prompt
    then. None when the engine does not return
    ids. ``concurrency``: requests in flight at once (the launch's batch size)."""
    wl = space.all_workloads[0]
    sampling = None
    if not wl.sampling.greedy:
        sampling = wl.sampling.unseeded()
    depth = max(
        (getattr(space.methods, m).num_speculative_tokens.max for m in space.methods.enabled()),
        default=0,
    )
    chosen = prompts[wl.name][: wl.num_prompts]
    limits = [p.max_tokens or wl.max_tokens for p in chosen]
    got = asyncio.run(
        server.probe.token_sequences(
            server.base_url,
            space.engine.served_model_name,
            chosen,
            limits,
            depth,
            timeout_s=wl.request_timeout_s,
            headers=server.headers,
            concurrency=concurrency,
            extra=chat_extra(wl),
            sampling=sampling,
            draws=SAMPLED_DRAWS,
        )
    )
    seqs = [[ids, out, [n]] for turns in got if turns is not None for ids, out, n in turns]
    return seqs or None


def sampled_outputs(
    server: Server, space: SearchSpace, prompts: dict[str, list[Prompt]], *, baseline: bool
) -> Samples | None:
    """Sampled continuations (token ids) for the distribution check: the first sampled
    workload's first prompts, ``samples_per_prompt`` each, under its settings but with the
    check's own seeds (the baseline's never a candidate's). None when no workload samples."""
    wl = space.sampled_workload
    if wl is None:
        return None
    ll = space.lossless
    chosen = prompts[wl.name][: ll.sampled_prompts]
    settings = wl.sampling.unseeded()
    return asyncio.run(
        server.probe.token_ids(
            server.base_url,
            space.engine.served_model_name,
            chosen,
            ll.sampled_tokens,
            sampling=settings,
            n=ll.samples_per_prompt,
            seeds=[
                sample_seed(i, ll.samples_per_prompt, baseline=baseline)
                for i in range(len(chosen))
            ],
            timeout_s=wl.request_timeout_s,
            headers=server.headers,
            extra=chat_extra(wl),
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
