"""The search strategy above Optuna's sampler: where a job starts, what it launches next,
when a trial stops early, and where to go when the sampler repeats itself.

- start: the baseline, each other target's baseline, ``start_with``, then (``warm_start``)
  the best configurations of earlier jobs on the same target, engine and hardware;
- next: the structure-aware guide (``_guide``: one launch per proposer prices all its
  depths; the best predicted depth next), the sampler when the guide is silent;
- classes: a proposal is launched as its class's cheapest member (``_classes``: batch size
  and memory share that cannot change any measured level);
- pruning: a trial whose objective point is dominated beyond both 95% intervals by a
  feasible trial on the same target stops there (Optuna's pruners take one intermediate
  value and do not support multi-objective studies, hence this rule);
- a repeated proposal enqueues the nearest unmeasured configuration around the incumbent.
"""

from __future__ import annotations

import functools
import json
import random
from typing import Any

import optuna

from tuner.candidates import (
    baseline_params,
    config_to_params,
    grid_configs,
    grid_params,
    other_targets,
    params_to_config,
    start_params,
)
from tuner.hardware import hardware_fingerprint
from tuner.measure import load_all_prompts
from tuner.pareto import feasible, job_report, score
from tuner.search._classes import canonical, kv_need_tokens
from tuner.search._guide import (
    Proposal,
    family_key,
    family_memory,
    predicted_points,
    prediction_note,
    propose,
)
from tuner.space import SearchSpace
from tuner.storage import Store, space_of_job
from tuner.workloads import Prompt, WorkloadError

__all__ = ["SearchStrategy", "dominated_by", "interval_text"]

GUIDE_ATTR = "spectune_search"  # Optuna user attribute carrying a guided trial's note


def _bound(m: dict[str, Any], name: str, which: str) -> float | None:
    st = (m.get("stats") or {}).get(name)
    if st and st.get("n", 1) >= 2:
        return st[which]
    return m.get(name)


def dominated_by(
    m: dict[str, Any], other: dict[str, Any], objectives: list[tuple[str, str]]
) -> bool:
    """True when ``other`` beats ``m`` on every objective even with ``m`` at the favourable
    end of its 95% interval and ``other`` at its unfavourable end (strictly on one)."""
    strict = False
    for name, direction in objectives:
        maximize = direction == "maximize"
        mine = _bound(m, name, "ci95_high" if maximize else "ci95_low")
        theirs = _bound(other, name, "ci95_low" if maximize else "ci95_high")
        if mine is None or theirs is None:
            return False
        if maximize:
            if theirs < mine:
                return False
            strict = strict or theirs > mine
        else:
            if theirs > mine:
                return False
            strict = strict or theirs < mine
    return strict


def interval_text(m: dict[str, Any], objectives: list[tuple[str, str]]) -> str:
    parts = []
    for name, _ in objectives:
        lo, hi = _bound(m, name, "ci95_low"), _bound(m, name, "ci95_high")
        if lo is None or hi is None:
            parts.append(f"{name} {m.get(name)}")
        else:
            parts.append(f"{name} {m.get(name, float('nan')):.2f} [{lo:.2f}-{hi:.2f}]")
    return ", ".join(parts)


class SearchStrategy:
    """One job's strategy; reads what the job measured so far from the store."""

    def __init__(
        self,
        store: Store,
        job_id: int,
        space: SearchSpace,
        n_trials: int,
        prompts: dict[str, list[Prompt]] | None = None,
    ) -> None:
        self.store, self.job_id, self.space, self.n_trials = store, job_id, space, n_trials
        self.objectives = [(o.metric, o.resolved_direction) for o in space.objectives]
        self._prompts = prompts  # the job's, already read; read here only when asked for

    @functools.cached_property
    def need_tokens(self) -> int | None:
        """KV tokens the workload's worst case needs (``kv_need_tokens``)."""
        try:
            prompts = self._prompts if self._prompts is not None else load_all_prompts(self.space)
        except (WorkloadError, OSError):
            return None  # the job fails on its workload elsewhere, with the reason
        return kv_need_tokens(self.space, prompts)

    # ------------------------------------------------------------------ what to launch next

    @functools.cached_property
    def grid(self) -> list[dict[str, Any]]:
        """Every configuration of the space (the guide groups them by proposer)."""
        return grid_configs(self.space)

    def canonical(self, params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """The member of ``params``' class the job launches, and why it is another one."""
        if self.space.search != "guided":
            return dict(params), []
        rows = self.store.trials(self.job_id, launched_only=True)
        measured = [(dict(r.params), r.kv_cache_tokens) for r in rows]
        return canonical(params, self.space, self.need_tokens, measured)

    def propose(self, study: optuna.Study) -> Proposal | None:
        """Enqueue the guide's next launch when nothing is queued; returns it (or None)."""
        if self.space.search != "guided":
            return None
        waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        if waiting:
            return None  # start points and neighbours first
        rows = self.store.trials(self.job_id)
        memory = family_memory(self.space, rows, self.need_tokens)
        prop = propose(self.space, rows, memory, self.grid)
        if prop is None:
            return None
        d = config_to_params(prop.params, self.space)
        if d is None:
            return None
        note = {"by": prop.by, "why": prop.why, "predicted": prop.predicted}
        study.enqueue_trial(d, user_attrs={GUIDE_ATTR: note})
        return prop

    def predictions(self) -> list[dict[str, Any]]:
        """The depth model's predictions for every unlaunched depth of the launched
        proposers, at the objective point: for people to see, never a measurement."""
        rows = self.store.trials(self.job_id)
        memory = family_memory(self.space, rows, self.need_tokens)
        level = f"{self.space.primary_workload}@{self.space.primary_concurrency}"
        return [
            {
                "params": c,
                "level": level,
                "metrics": p.metrics,
                "rel_sigma": p.rel_sigma,
                "basis": list(p.basis),
                "notes": list(p.notes),
            }
            for c, p in predicted_points(self.space, rows, memory, self.grid)
        ]

    def prediction_for(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The depth model's prediction for a configuration about to launch (whoever
        proposed it), or None when its proposer has not been launched yet."""
        if self.space.search != "guided" or params.get("method") in (None, "none"):
            return None
        rows = self.store.trials(self.job_id)
        memory = family_memory(self.space, rows, self.need_tokens)
        fk, k = family_key(params), params.get("num_speculative_tokens")
        level = (self.space.primary_workload, self.space.primary_concurrency)
        for c, p in predicted_points(self.space, rows, memory, self.grid):
            if family_key(c) == fk and c["num_speculative_tokens"] == k:
                return prediction_note(p, self.space.objectives[0].metric, level)
        return None

    # ------------------------------------------------------------------ where to start

    def initial_params(self) -> list[tuple[dict[str, Any], bool]]:
        """(Optuna parameters, skip if already queued) in the order a new job enqueues them."""
        out = [(baseline_params(self.space), False)]
        for target in other_targets(self.space):  # its own baseline, before any trial on it
            out.append((baseline_params(self.space, target), False))
        out += [(p, True) for p in start_params(self.space)]
        if self.space.search == "guided":
            # The most KV cache the space allows, unless the point says otherwise: a baseline
            # (or start point) short of KV cache preempts and flatters every comparison.
            said = [sp.memory_fraction for sp in self.space.start_with]
            top = self.space.memory_fraction[-1]
            for i, (p, _) in enumerate(out):
                sp_i = i - 1 - len(other_targets(self.space))
                if sp_i < 0 or said[sp_i] is None:
                    p["memory_fraction"] = top
        out += [(p, True) for p in self.warm_start_params()]
        return out

    def warm_start_params(self) -> list[dict[str, Any]]:
        """The best configurations of earlier succeeded jobs on the same target, engine kind,
        device and hardware, that lie in this space (best first). A replayed job is never a
        hint: its numbers were not measured on this machine."""
        space = self.space
        if space.warm_start <= 0:
            return []
        me = (
            space.resolve(space.engine.model),
            space.engine.kind,
            hardware_fingerprint(space.engine.device),
        )
        earlier = []
        for j in self.store.succeeded_jobs(except_job=self.job_id):
            try:
                js = space_of_job(j)
            except ValueError:  # SpaceError included
                continue  # a job stored by an older schema: not a safe hint
            key = (js.resolve(js.engine.model), js.engine.kind, j.space.get("hardware"))
            if key == me and js.engine.surface is None:
                earlier.append(j.job_id)
        ranked: list[tuple[float, dict[str, Any]]] = []
        for jid in earlier:
            rep = job_report(self.store, jid)
            name, direction = rep.objectives[0]
            sign = -1.0 if direction == "maximize" else 1.0
            ranked += [(sign * score(p, name), p.params) for p in rep.front if p.method != "none"]
        out: list[dict[str, Any]] = []
        for _, c in sorted(ranked, key=lambda x: x[0]):
            d = config_to_params(c, space)
            if d is not None and d not in out:
                out.append(d)
            if len(out) >= space.warm_start:
                break
        return out

    # ------------------------------------------------------------------ pruning

    def objective_points(self, model: str) -> list[tuple[int, dict, dict, float | None]]:
        """(number, params, metrics, greedy match) of each complete, launched trial on one
        target, at the objective point (first workload, objective concurrency)."""
        point = (self.space.primary_workload, self.space.primary_concurrency)
        rows = self.store.trials(self.job_id, states=("complete",), launched_only=True)
        return [
            (r.number, dict(r.params), dict(m.metrics), r.lossless_match_rate)
            for r in rows
            if r.engine_config.get("model") == model  # another target is never compared
            for m in r.measurements
            if (m.workload, m.concurrency) == point
        ]

    def prune_check(self, m: dict[str, Any], model: str) -> str | None:
        """Evidence that the objective point is clearly dominated by a feasible trial
        already measured in this job on the same target, or None."""
        limits = self.space.slo.limits()
        ll = self.space.lossless
        min_match = ll.min_match_rate if ll.enabled else None
        for number, _, om, rate in self.objective_points(model):
            ok, _ = feasible(om, limits, lossless_match_rate=rate, min_match_rate=min_match)
            if ok and dominated_by(m, om, self.objectives):
                return (
                    f"pruned after concurrency {self.space.primary_concurrency}: "
                    f"{interval_text(m, self.objectives)} is dominated by trial {number} "
                    f"({interval_text(om, self.objectives)}) even at the favourable end of its "
                    "95% interval; the other levels and the lossless check were skipped"
                )
        return None

    # ------------------------------------------------------------------ repeated proposals

    def incumbent(self) -> dict[str, Any] | None:
        """The best configuration measured so far on the first objective (engine.model)."""
        o = self.space.objectives[0]
        sign = -1.0 if o.resolved_direction == "maximize" else 1.0
        best: tuple[float, dict[str, Any]] | None = None
        for _, params, m, _ in self.objective_points(self.space.resolve(self.space.engine.model)):
            v = (m.get("score") or {}).get(o.metric, m.get(o.metric))
            if v is not None and (best is None or sign * v < best[0]):
                best = (sign * float(v), params)
        return None if best is None else best[1]

    def enqueue_neighbour(self, trial: optuna.Trial, params: dict[str, Any]) -> None:
        """After the sampler proposed a configuration already measured, enqueue the nearest
        unmeasured one (fewest parameters changed, ties broken by the job's seed), around the
        incumbent: the sampler repeating itself has little new to say, and one-parameter
        moves from the best point are what an engineer would try next."""
        if trial.number + 1 >= self.n_trials:
            return  # no trial left to use it (a waiting trial would outlive the job)
        space = self.space
        seen = {json.dumps(r, sort_keys=True) for r in self.store.measured_params(self.job_id)}
        waiting = (optuna.trial.TrialState.WAITING,)
        for t in trial.study.get_trials(deepcopy=False, states=waiting):
            fixed = t.system_attrs.get("fixed_params")
            if fixed:
                seen.add(json.dumps(params_to_config(fixed, space), sort_keys=True))
        rows = self.store.trials(self.job_id, launched_only=True)
        measured = [(dict(r.params), r.kv_cache_tokens) for r in rows]

        def launched_as(p: dict[str, Any]) -> str:
            c, _ = canonical(params_to_config(p, space), space, self.need_tokens, measured)
            return json.dumps(c, sort_keys=True)

        fresh = [p for p in grid_params(space) if launched_as(p) not in seen]
        if not fresh:
            return
        inc = self.incumbent()
        if inc is not None:
            params = inc

        def distance(p: dict[str, Any]) -> int:
            c = params_to_config(p, space)
            return sum(c.get(k) != params.get(k) for k in set(c) | set(params))

        best = min(distance(p) for p in fresh)
        near = [p for p in fresh if distance(p) == best]
        pick = random.Random(space.seed * 7919 + trial.number).choice(near)
        trial.study.enqueue_trial(pick, user_attrs={GUIDE_ATTR: {"by": "neighbour"}})
