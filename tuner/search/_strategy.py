"""The search strategy above Optuna's sampler: where a job starts, what it launches next,
when a trial stops early, and where to go when the sampler repeats itself.

- start: ``StartPoints`` (``_start``: baselines, ``start_with``, warm start);
- next: the structure-aware guide (``_guide``: one launch per proposer prices all its
  depths; the best predicted depth next), the sampler when the guide is silent;
- classes: a proposal is launched as its class's cheapest member (``_classes``: batch size
  and memory share that cannot change any measured level);
- pruning: ``DominancePruner`` (``_pruner``: dominated beyond both 95% intervals by a
  feasible trial on the same target);
- a repeated proposal enqueues the nearest unmeasured configuration around the incumbent.

The job's trials are read once per trial and shared by these questions (``_snapshot``).
"""

from __future__ import annotations

import functools
import json
import random
from typing import Any

import optuna

from tuner.candidates import config_to_params, grid_configs, grid_params, params_to_config
from tuner.context import JobContext
from tuner.measure import load_all_prompts
from tuner.offline import UNPRICED_OTHER_TARGET, OfflinePrices
from tuner.pareto import Report, job_report
from tuner.search._classes import canonical, kv_need_tokens
from tuner.search._guide import Proposal, family_key, predicted_points, propose
from tuner.search._layout import config_key
from tuner.search._offline import offline_prices, priced_on
from tuner.search._predicted import PredictedPoint
from tuner.search._pruner import DominancePruner, objective_points
from tuner.search._snapshot import JobTrials
from tuner.search._start import StartPoints
from tuner.search._stop import Outlook, outlook
from tuner.space import running_batch
from tuner.storage import TrialState
from tuner.workloads import Prompt, WorkloadError

__all__ = ["GUIDE_ATTR", "SearchStrategy"]

GUIDE_ATTR = "spectune_search"  # Optuna user attribute carrying a guided trial's note


class SearchStrategy:
    """One job's strategy; reads what the job measured so far from the store."""

    def __init__(self, ctx: JobContext, prompts: dict[str, list[Prompt]] | None = None) -> None:
        self.ctx = ctx
        self.store, self.job_id, self.space = ctx.store, ctx.job_id, ctx.space
        self.objectives = [(o.metric, o.resolved_direction) for o in self.space.objectives]
        self._prompts = prompts  # the job's, already read; read here only when asked for
        self.start = StartPoints(ctx)
        self.pruner = DominancePruner(self.space)
        self.trials = JobTrials(self.store, self.job_id, self.space, lambda: self.need_tokens)
        self._prices: OfflinePrices | None = None
        self._deepest: dict[str, dict[str, Any]] = {}
        self._stored: OfflinePrices | None = None  # the prices last kept with the job

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
        measured = self.trials.current().measured()
        return canonical(params, self.space, self.need_tokens, measured)

    def outlook(self, rep: Report | None = None) -> Outlook | None:
        """What is left of the objective class and whether any of it can still beat the
        winner (``_stop``); None for a sampler-only search (its budget decides)."""
        if self.space.search != "guided":
            return None
        rep = rep if rep is not None else job_report(self.store, self.job_id)
        snap = self.trials.current()
        return outlook(self.space, snap.rows, snap.memory, self.grid, self.prices(), rep)

    def propose(self, study: optuna.Study, look: Outlook | None = None) -> Proposal | None:
        """Enqueue the guide's next launch when nothing is queued; returns it (or None).
        With the job's ``look``, only what can still win is launched: a guide proposal the
        outlook rules out gives way to the outlook's best (or a configuration nothing prices
        yet), and the guide falling silent does too."""
        if self.space.search != "guided":
            return None
        waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        if waiting:
            return None  # start points and neighbours first
        snap = self.trials.current()
        prop = propose(self.space, snap.rows, snap.memory, self.grid, self.prices())
        if look is not None and look.winner is not None:
            prop = _within(prop, look)
        if prop is None:
            return None
        d = config_to_params(prop.params, self.space)
        if d is None:
            return None
        note = {"by": prop.by, "why": prop.why, "predicted": prop.predicted}
        if prop.skipped:
            note["skipped"] = list(prop.skipped)
        study.enqueue_trial(d, user_attrs={GUIDE_ATTR: note})
        return prop

    def prices(self) -> OfflinePrices | None:
        """Offline acceptance of every proposer of the space, once a baseline's outputs are
        stored (computed once per job and process; ``tuner.search._offline``). Proposers
        served by another target (an MTP checkpoint) are priced when that target's baseline
        has its outputs, and added then."""
        if self.space.search != "guided" or not self.space.offline_pricing:
            return None
        if self._prices is None:
            deepest: dict[str, dict[str, Any]] = {}
            for c in self.grid:
                if c["method"] == "none":
                    continue
                fk = family_key(c)
                if c["num_speculative_tokens"] >= deepest.get(fk, {}).get(
                    "num_speculative_tokens", 0
                ):
                    deepest[fk] = c
            self._deepest = deepest
            rows = self.trials.current().rows
            self._prices = offline_prices(self.space, rows, deepest)
        elif waiting := {
            fk: c
            for fk, c in self._deepest.items()
            if self._prices.unpriced.get(fk) == UNPRICED_OTHER_TARGET
        }:
            rows = self.trials.current().rows
            if any(priced_on(rows, c.get("target")) is not None for c in waiting.values()):
                more = offline_prices(self.space, rows, waiting)
                if more is not None:
                    self._prices = self._prices.merged(more)
        return self._prices

    def keep_prices(self) -> None:
        """Keep the offline prices with the job when they changed (the job's owner calls
        this; a reader's strategy never writes): the report shows every proposer's price,
        launched or not."""
        prices = self.prices()
        if prices is not None and prices is not self._stored:
            self.store.set_offline_prices(self.job_id, prices.to_json())
            self._stored = prices

    def offline_for(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The offline acceptance of a configuration about to launch, as stored beside it
        (``search["offline"]``): a prediction made before the launch, never a measurement."""
        prices = self.prices()
        if prices is None or params.get("method") in (None, "none"):
            return None
        fk, k = family_key(params), int(params.get("num_speculative_tokens") or 0)
        acc = prices.get(fk, k)
        if acc is None:
            why = prices.unpriced.get(fk)
            return {"unpriced": why} if why else None
        note = {
            "acceptance_rate": round(acc.acceptance_rate, 4),
            "mean_acceptance_length": round(acc.mean_acceptance_length, 4),
            "per_position_acceptance": [round(a, 4) for a in acc.per_position_acceptance],
            "basis": prices.basis,
            "seconds": round(prices.seconds, 3),
        }
        if acc.acceptance_rate_se is not None:  # a sampled price: its error over the draws
            note["acceptance_rate_se"] = round(acc.acceptance_rate_se, 4)
        return note

    def predictions(self) -> list[PredictedPoint]:
        """The depth model's predictions for every unlaunched depth of the launched
        proposers, at the objective point: for people to see, never a measurement."""
        snap = self.trials.current()
        return predicted_points(self.space, snap.rows, snap.memory, self.grid)

    def prediction_for(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The depth model's prediction for a configuration about to launch (whoever
        proposed it), as stored beside it; None when its proposer has not been launched, or
        when it runs another batch at the objective level than the predictions (a batch
        that queues is another load: no prediction, rather than a wrong one)."""
        if self.space.search != "guided" or params.get("method") in (None, "none"):
            return None
        fk, k = family_key(params), params.get("num_speculative_tokens")
        c = self.space.primary_concurrency
        run = running_batch(int(params["max_num_seqs"]), c)
        for p in self.predictions():
            if family_key(p.params) == fk and p.params["num_speculative_tokens"] == k:
                if running_batch(int(p.params["max_num_seqs"]), c) != run:
                    return None
                return p.note(self.space.objectives[0].metric)
        return None

    # ------------------------------------------------------------------ where to start

    def initial_params(self) -> list[tuple[dict[str, Any], bool]]:
        """(Optuna parameters, skip if already queued) in the order a new job enqueues them."""
        return self.start.initial_params()

    def warm_start_params(self) -> list[dict[str, Any]]:
        """The best configurations of earlier jobs like this one (``StartPoints``)."""
        return self.start.warm_start_params()

    # ------------------------------------------------------------------ pruning

    def prune_check(self, m: dict[str, Any], model: str) -> str | None:
        """Evidence that the objective point is clearly dominated by a feasible trial
        already measured in this job on the same target, or None. Read afresh: another
        worker's trial may have completed while this one was measured."""
        complete = (TrialState.COMPLETE,)
        rows = self.store.trials(self.job_id, states=complete, launched_only=True)
        return self.pruner.evidence(m, objective_points(rows, self.space, model))

    # ------------------------------------------------------------------ repeated proposals

    def incumbent(self) -> dict[str, Any] | None:
        """The best configuration measured so far on the first objective (engine.model)."""
        o = self.space.objectives[0]
        sign = -1.0 if o.resolved_direction == "maximize" else 1.0
        model = self.space.resolve_model(self.space.engine.model)
        best: tuple[float, dict[str, Any]] | None = None
        for pt in objective_points(self.trials.current().rows, self.space, model):
            params, m = pt.params, pt.metrics
            v = (m.get("score") or {}).get(o.metric, m.get(o.metric))
            if v is not None and (best is None or sign * v < best[0]):
                best = (sign * float(v), params)
        return None if best is None else best[1]

    def enqueue_neighbour(self, trial: optuna.Trial, params: dict[str, Any]) -> None:
        """After the sampler proposed a configuration already measured, enqueue the nearest
        unmeasured one (fewest parameters changed, ties broken by the job's seed), around the
        incumbent: the sampler repeating itself has little new to say, and one-parameter
        moves from the best point are what an engineer would try next."""
        if trial.number + 1 >= self.ctx.n_trials:
            return  # no trial left to use it (a waiting trial would outlive the job)
        space = self.space
        snap = self.trials.current()
        seen = {json.dumps(dict(r.params), sort_keys=True) for r in snap.rows}  # ran or runs
        waiting = (optuna.trial.TrialState.WAITING,)
        for t in trial.study.get_trials(deepcopy=False, states=waiting):
            fixed = t.system_attrs.get("fixed_params")
            if fixed:
                seen.add(json.dumps(params_to_config(fixed, space), sort_keys=True))
        measured = snap.measured()

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


def _within(prop: Proposal | None, look: Outlook) -> Proposal | None:
    """What to launch among what can still win: ``prop`` when it is a launch nothing can
    price yet (a scan, another batch class); else the priced configuration with the largest
    expected gain over the winner (``Outlook.best``: the guide's best central prediction
    may be a near tie whose band is narrow, while a rival's wider band holds more gain),
    else ``prop`` when the outlook allows it, else one nothing prices yet, else None."""
    best = look.best
    if prop is not None:
        key = config_key(prop.params)
        if key in {config_key(c.params) for c in look.unknown}:
            return prop
        hopeful = key in {config_key(c.params) for c in look.hopeful}
        if hopeful and (best is None or best.gain is None or config_key(best.params) == key):
            return prop
    if best is not None:
        gain = f", expected gain {100 * best.gain:.2g} %" if best.gain is not None else ""
        why = (
            f"can still win: optimistic {look.metric} {best.optimistic:.4g} ({best.how}) "
            f"against the winner's bound {look.bound:.4g}{gain}"
        )
        return Proposal(dict(best.params), "guide: can win", why, best.note)
    if look.unknown:
        c = look.unknown[0]
        return Proposal(dict(c.params), "guide: scan", f"nothing prices it yet: {c.how}")
    return None
