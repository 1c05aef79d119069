"""The one read model of a trial: Optuna's state and constraints joined with SpecTune's row.

The CLI (``spectune trials``) and the API (``/api/jobs/{id}/trials``) both read this; neither
rebuilds a record by hand.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from tuner.space import GREEDY
from tuner.states import TrialState
from tuner.storage._retry import retry_db
from tuner.storage._stored_space import SpaceRefused

__all__ = [
    "RecordQueries",
    "TrialRecord",
    "named_constraints",
    "prediction_point",
    "read_search_note",
    "search_launch",
]

# Optuna 5 keeps each constraint of a trial under its own system attr, ``constraints:<name>``.
_CONSTRAINT_PREFIX = "constraints:"


def search_launch(metrics: Mapping[str, Any]) -> Mapping[str, Any]:
    """The numbers of the launch the search made: a confirmed trial's are the second
    launch's, and the confirmation keeps the first's under ``search``."""
    return metrics.get("search") or metrics


def prediction_point(pred: Mapping[str, Any]) -> tuple[str, int] | None:
    """(workload, concurrency) a stored prediction was made for, or None when it does not
    say. Notes stored before these two fields hold only ``level`` (``"chat@1"``): this is the
    one place that parses it."""
    wl, conc = pred.get("workload"), pred.get("concurrency")
    if wl is not None and conc is not None:
        return str(wl), int(conc)
    level = pred.get("level")
    if not isinstance(level, str) or "@" not in level:
        return None
    wl, _, conc = level.rpartition("@")
    try:
        return wl, int(conc)
    except ValueError:
        return None


def read_search_note(search: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A trial's stored search note as readers get it: its prediction's point as
    ``workload`` and ``concurrency`` whatever version stored it, and ``level``
    (``workload@concurrency``) derived from them for the API's earlier readers."""
    if search is None:
        return None
    pred = search.get("predicted")
    point = prediction_point(pred) if isinstance(pred, Mapping) else None
    if point is None:
        return dict(search)
    wl, conc = point
    return {
        **search,
        "predicted": {**pred, "workload": wl, "concurrency": conc, "level": f"{wl}@{conc}"},
    }


def named_constraints(system_attrs: Mapping[str, Any]) -> dict[str, float]:
    """A trial's constraints by name, read from its ``constraints:<name>`` system attrs.

    Not ``FrozenTrial.constraints``: that also numbers the list kept under ``constraints``
    (the copy optuna-dashboard reads, ``tuner/integrations/_dashboard.py``) as ``"0"``,
    ``"1"``, …, which a constraint named ``"0"`` would then clash with."""
    return {
        k.removeprefix(_CONSTRAINT_PREFIX): float(v)
        for k, v in system_attrs.items()
        if k.startswith(_CONSTRAINT_PREFIX)
    }


class TrialRecord(BaseModel):
    """A trial as users see it: metrics at the job's objective point, units in their names."""

    model_config = ConfigDict(frozen=True)

    number: int
    state: str = Field(description="Optuna's state in lower case: complete, pruned, fail, …")
    method: str | None
    params: dict[str, Any]
    fail_reason: str | None = None
    fail_detail: str | None = None
    log_path: str | None = None
    startup_s: float | None = None
    reused_from: int | None = None
    lossless_match_rate: float | None = None
    lossless_p_value: float | None = Field(
        None,
        description="p-value of its sampled outputs against the baseline's (the distribution "
        "check of a sampled workload); below the space's lossless.alpha: not lossless",
    )
    kv_cache_tokens: int | None = None
    peak_rss_mb: float | None = None
    constraints: dict[str, float] = Field(default_factory=dict)
    concurrency: int = Field(description="the job's objective concurrency")
    workload: str = Field(description="the job's first workload")
    metrics: dict[str, Any] = Field(
        default_factory=dict, description="the measurement at (workload, concurrency)"
    )
    measurements: list[dict[str, Any]] = Field(default_factory=list)
    worker_id: str | None = Field(None, description="the worker that ran it")
    devices: str | None = Field(None, description="the devices it ran on (--devices)")
    search: dict[str, Any] | None = Field(
        None,
        description="how the search proposed it: by (start, guide: scan, guide: depth, "
        "sampler, neighbour, guide: offline, guide: batch), why, predicted (a prediction "
        "made before the "
        "launch, never a measurement), offline (acceptance priced on the baseline's outputs "
        "before the launch), skipped (proposers not launched, and why) and class (what was "
        "proposed, when launched as its class's member)",
    )

    @field_validator("search")
    @classmethod
    def _typed_prediction(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return read_search_note(v)

    @computed_field(
        description="measured (by the launch it was predicted for) minus predicted first "
        "objective, % of predicted"
    )
    def prediction_error_pct(self) -> float | None:
        pred = (self.search or {}).get("predicted") or {}
        v, name = pred.get("value"), pred.get("objective")
        got = search_launch(self.metrics).get(name) if name else None  # the launch it priced
        if not v or got is None or self.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            return None
        return 100.0 * (float(got) - float(v)) / float(v)

    @computed_field(
        description="acceptance rate predicted before the launch from the baseline's outputs "
        "(greedy, or sampled as the workload samples; offline pricing); a prediction, never a "
        "measurement"
    )
    def offline_acceptance_rate(self) -> float | None:
        v = ((self.search or {}).get("offline") or {}).get("acceptance_rate")
        return None if v is None else float(v)

    @computed_field(
        description="standard error of offline_acceptance_rate over the baseline's sampled "
        "outputs (sampled traffic only; a greedy price is exact on its prompts)"
    )
    def offline_acceptance_rate_se(self) -> float | None:
        v = ((self.search or {}).get("offline") or {}).get("acceptance_rate_se")
        return None if v is None else float(v)

    @computed_field(description="per-position acceptance predicted before the launch")
    def offline_per_position_acceptance(self) -> list[float] | None:
        v = ((self.search or {}).get("offline") or {}).get("per_position_acceptance")
        return None if v is None else [float(x) for x in v]

    def flat(self) -> dict[str, Any]:
        """The record with the objective point's metrics at the top level (``--json``)."""
        d = self.model_dump(exclude={"metrics", "measurements"})
        d.update({k: v for k, v in self.metrics.items() if k not in ("workload", "concurrency")})
        d["measurements"] = self.measurements
        return d


# A stored row in these states holds what its launch measured: the record of the trial even
# where Optuna failed it (its worker died between storing and telling, and it was declared
# lost), since a trial with a stored result is never run again.
_MEASURED = (TrialState.COMPLETE, TrialState.PRUNED)


def retried_number(t: optuna.trial.FrozenTrial) -> int | None:
    """The lost trial this one runs again, or None: the last of the retry history Optuna's
    ``RetryHeartbeatStaleTrialCallback`` keeps (its ``retried_trial_number`` names the first
    of a chain, whatever retry was lost since). Its reader is experimental (a warning per
    call), so every reader goes through here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        history = RetryHeartbeatStaleTrialCallback.retry_history(t)
    return history[-1] if history and isinstance(history[-1], int) else None


_ROW_KEYS = (
    "fail_reason",
    "fail_detail",
    "log_path",
    "startup_s",
    "reused_from",
    "lossless_match_rate",
    "lossless_p_value",
    "kv_cache_tokens",
    "peak_rss_mb",
    "worker_id",
    "devices",
    "search",
)


class RecordQueries:
    """Mixin of ``Store``: needs ``job``, ``space``, ``trials`` and ``load_study``."""

    job: Callable[..., Any]
    space: Callable[..., Any]
    trials: Callable[..., list[Any]]
    load_study: Callable[..., optuna.Study]

    @retry_db
    def trial_records(self, job_id: int) -> list[TrialRecord]:
        """Every trial of the job (waiting ones too), by number; JobNotFound if none. A job
        whose stored space today's rules refuse still lists its trials (``space_of_job``)."""
        try:
            space = self.space(job_id, for_reading=True)
            conc, wl = space.primary_concurrency, space.primary_workload
        except SpaceRefused:  # not even readable: no objective point, every measurement
            conc, wl = 0, ""
        rows = {r.number: r for r in self.trials(job_id)}
        trials = self.load_study(job_id).get_trials(deepcopy=False)
        retried = {n: t.number for t in trials if (n := retried_number(t)) is not None}
        out = []
        for t in trials:
            r = rows.get(t.number)
            # every point states its sampling: one stored before sampling existed was greedy
            ms = [{"sampling": dict(GREEDY), **m.metrics} for m in r.measurements] if r else []
            prim = next((m for m in ms if (m["workload"], m["concurrency"]) == (wl, conc)), {})
            row: dict[str, Any] = {}
            if r is not None:
                row = {k: getattr(r, k) for k in _ROW_KEYS}
            state = t.state.name.lower()
            if state == TrialState.FAIL and r is not None and r.state in _MEASURED:
                state = r.state  # stored, but its worker died before Optuna was told
            elif state == TrialState.FAIL and t.number in retried and not row.get("fail_reason"):
                row["fail_reason"] = "interrupted"  # its worker died before it stored a row
                row["fail_detail"] = row.get("fail_detail") or (
                    f"its worker stopped before the trial finished; trial {retried[t.number]} "
                    "ran it again"
                )
            out.append(
                TrialRecord(
                    number=t.number,
                    state=state,
                    method=(r.method if r is not None else None) or t.params.get("method"),
                    params=(dict(r.params) if r is not None else None) or dict(t.params),
                    constraints=named_constraints(t.system_attrs),
                    concurrency=conc,
                    workload=wl,
                    metrics=prim,
                    measurements=ms,
                    **row,
                )
            )
        return out
