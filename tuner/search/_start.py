"""Where a job starts: the baseline, each other target's baseline, ``start_with``, then
(``warm_start``) the best configurations of earlier jobs on the same target, engine and
hardware."""

from __future__ import annotations

from typing import Any

from tuner.candidates import baseline_params, config_to_params, other_targets, start_params
from tuner.context import JobContext
from tuner.hardware import hardware_fingerprint
from tuner.pareto import job_report, score
from tuner.storage import space_of_job

__all__ = ["StartPoints"]


class StartPoints:
    """The trials a new job enqueues before any proposal (Optuna parameters)."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx

    def initial_params(self) -> list[tuple[dict[str, Any], bool]]:
        """(Optuna parameters, skip if already queued) in the order a new job enqueues them."""
        space = self.ctx.space
        out = [(baseline_params(space), False)]
        for target in other_targets(space):  # its own baseline, before any trial on it
            out.append((baseline_params(space, target), False))
        out += [(p, True) for p in start_params(space)]
        if space.search == "guided":
            # The most KV cache the space allows, unless the point says otherwise: a baseline
            # (or start point) short of KV cache preempts and flatters every comparison.
            said = [sp.memory_fraction for sp in space.start_with]
            top = space.memory_fraction[-1]
            for i, (p, _) in enumerate(out):
                sp_i = i - 1 - len(other_targets(space))
                if sp_i < 0 or said[sp_i] is None:
                    p["memory_fraction"] = top
        out += [(p, True) for p in self.warm_start_params()]
        return out

    def warm_start_params(self) -> list[dict[str, Any]]:
        """The best configurations of earlier succeeded jobs on the same target, engine kind,
        device and hardware, that lie in this space (best first). A replayed job is never a
        hint: its numbers were not measured on this machine."""
        store, space = self.ctx.store, self.ctx.space
        if space.warm_start <= 0:
            return []
        me = (
            space.resolve_model(space.engine.model),
            space.engine.kind,
            hardware_fingerprint(space.engine.device),
        )
        earlier = []
        for j in store.succeeded_jobs(except_job=self.ctx.job_id):
            try:
                js = space_of_job(j)
            except ValueError:  # SpaceError included
                continue  # a job stored by an older schema: not a safe hint
            key = (js.resolve_model(js.engine.model), js.engine.kind, j.space.get("hardware"))
            if key == me and js.engine.surface is None:
                earlier.append(j.job_id)
        ranked: list[tuple[float, dict[str, Any]]] = []
        for jid in earlier:
            rep = job_report(store, jid, history=False)  # the front only: no interval read
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
