"""Which parameters moved the job's first objective: ``tuner.explain.param_importances``
(PED-ANOVA with a permutation test), only what the data supports, else why it cannot tell.

The permutation test re-runs the evaluator a hundred times: an answer is kept per job and
number of finished trials, so a page that polls does not recompute it."""

from __future__ import annotations

import threading

from tuner.api.schemas import ImportancePublic, ParamImportance
from tuner.explain import importance_sentence, param_importances
from tuner.space import SpaceError
from tuner.states import TrialState
from tuner.storage import Store

__all__ = ["importance"]


_cache: dict[tuple[str, int, int, str], ImportancePublic] = {}
_lock = threading.Lock()


def importance(store: Store, job_id: int) -> ImportancePublic:
    job = store.job(job_id, with_trials=True)
    try:
        metric = store.space(job_id).objectives[0].metric
    except SpaceError as e:  # a job stored by another version: nothing to rank against
        return ImportancePublic(
            job_id=job_id,
            metric="",
            n_configs=0,
            supported=[],
            sentence=f"The data cannot tell which parameter mattered (its space: {e}).",
        )
    done = sum(t.state == TrialState.COMPLETE for t in job.trials)
    key = (store.url, job_id, done, job.state)
    with _lock:
        if key in _cache:
            return _cache[key]
    imp = param_importances(store, job_id)
    supported = [ParamImportance(param=k, share=s, p_value=p) for k, (s, p) in imp.shown.items()]
    out = ImportancePublic(
        job_id=job_id,
        metric=metric,
        n_configs=imp.n_configs,
        supported=supported,
        sentence=importance_sentence(metric, imp),
    )
    with _lock:
        if len(_cache) > 256:
            _cache.clear()
        _cache[key] = out
    return out
