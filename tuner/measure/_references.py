"""Hosted endpoints (``hosted:`` in a space): measured once per job as reference rows."""

from __future__ import annotations

import os

from tuner.engines import HostedServer
from tuner.loadgen import LoadError
from tuner.measure._protocol import measure_point
from tuner.space import SearchSpace
from tuner.states import TrialState
from tuner.storage import ReferenceModel, Store
from tuner.workloads import Prompt

__all__ = ["measure_references"]


def measure_references(
    store: Store, job_id: int, space: SearchSpace, prompts: dict[str, list[Prompt]]
) -> None:
    """Measure each hosted endpoint once per job (a resumed job keeps what it has): every
    workload and level, same repeats and load generator as the trials. A missing key or an
    unreachable endpoint is stored as a failed reference with its reason, not a job failure."""
    done = store.reference_names(job_id)
    for h in space.hosted:
        if h.name in done:
            continue
        row = ReferenceModel(
            job_id=job_id,
            name=h.name,
            base_url=h.root,
            model=h.model,
            state=TrialState.COMPLETE,
            measurements=[],
        )
        headers = None
        if h.api_key_env:
            key = os.environ.get(h.api_key_env)
            if not key:
                row.state = TrialState.FAIL
                row.error = f"environment variable {h.api_key_env} is not set"
            else:
                headers = {"Authorization": f"Bearer {key}"}
        if row.state == TrialState.COMPLETE:
            server = HostedServer(h.root, headers)
            engine = space.engine.model_copy(update={"served_model_name": h.model})
            hosted_space = space.model_copy(update={"engine": engine})
            try:
                for wl in space.all_workloads:
                    for level in space.concurrency:
                        m = measure_point(server, hosted_space, wl, prompts[wl.name], level)
                        m["hosted"] = h.name
                        row.measurements = [*row.measurements, m]
                        if m["num_ok"] == 0:
                            raise LoadError(f"every request failed: {m.get('errors')}")
            except (LoadError, OSError) as e:
                row.state, row.error = TrialState.FAIL, str(e)[:2000]
        store.add_reference(row)
