"""A tuning job: an Optuna study whose trials launch a real engine and measure it.

Data flow per trial: sample a candidate (define-by-run: method-specific parameters exist only
for their method) -> pre-flight checks -> launch the engine -> measure every concurrency level
-> store -> report objectives and SLO constraints to Optuna. The no-speculation baseline is
enqueued first, so every job measures the same target without speculation on the same
workload.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from tuner.engines import EngineConfig, EngineLaunchError, SGLangServer, VLLMServer
from tuner.loadgen import LoadError, greedy_token_ids, measure, reset_prefix_cache
from tuner.metrics import Measurement
from tuner.preflight import PreflightError, preflight
from tuner.space import SearchSpace, WorkloadSpec, parse_space
from tuner.stats import aggregate, noise_score, relative_mad
from tuner.storage import (
    JobModel,
    MeasurementModel,
    ReferenceModel,
    TrialModel,
    ensure_schema,
    session_scope,
    utcnow,
)
from tuner.workloads import Prompt, WorkloadError, builtin_path, read_jsonl

__all__ = [
    "JobCancelled",
    "JobControl",
    "JobNotFound",
    "PreflightError",
    "TrialEvent",
    "create_job",
    "load_all_prompts",
    "preflight",
    "run_job",
    "sample_candidate",
    "space_of_job",
    "trial_records",
]

log = logging.getLogger(__name__)

MAX_FAILED_FRACTION = 0.0  # any failed request makes a point infeasible: its numbers lie
LOG_TAIL_CHARS = 4000


class JobNotFound(LookupError):
    pass


class TrialFailed(RuntimeError):
    """Raised inside the objective so Optuna records FAIL while the study goes on."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail[-300:]}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class TrialEvent:
    """What a progress display needs after each trial."""

    number: int
    n_trials: int
    state: str
    method: str
    params: dict[str, Any]
    seconds: float
    summary: str


class JobControl:
    """Lets another thread cancel a running job: the engine in flight is stopped at once,
    finished trials are kept, and the job ends ``cancelled``."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._server: VLLMServer | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            server = self._server
        if server is not None:
            server.stop(grace_s=5)

    def _attach(self, server: VLLMServer | None) -> None:
        with self._lock:
            self._server = server
        if server is not None and self.cancelled:
            server.stop(grace_s=5)


class JobCancelled(RuntimeError):
    pass


def log_folder(url: str, job_id: int) -> str:
    """Job ids restart in every database: the folder names the database too, so two
    databases sharing a work folder never overwrite each other's engine logs."""
    import hashlib

    from sqlalchemy.engine import make_url

    try:
        u = make_url(url)
        name = Path(u.database).stem if u.get_backend_name() == "sqlite" and u.database else ""
    except Exception:
        name = ""
    tag = hashlib.sha256(url.encode()).hexdigest()[:6]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40]
    return f"{safe}-{tag}-job-{job_id}" if safe else f"{tag}-job-{job_id}"


def study_name_for(job_id: int) -> str:
    return f"spectune-job-{job_id}"


def create_job(
    url: str, space: SearchSpace, *, space_yaml: str | None = None, n_trials: int | None = None
) -> int:
    """Store a queued job and its Optuna study; returns the job id."""
    ensure_schema(url)
    load_all_prompts(space)  # refuse a bad workload now, not after the first launch
    data = space.model_dump(mode="json")
    data["base_dir"] = str(space.base_dir)
    data["hardware"] = hardware_fingerprint(space.engine.device)
    with session_scope(url) as s:
        job = JobModel(
            name=space.name,
            study_name=f"pending-{time.time_ns()}",
            state="queued",
            space=data,
            space_yaml=space_yaml,
            n_trials=n_trials or space.trials,
        )
        s.add(job)
        s.flush()
        job.study_name = study_name_for(job.job_id)
        job_id = job.job_id
    try:
        optuna.create_study(
            storage=url,
            study_name=study_name_for(job_id),
            directions=[o.resolved_direction for o in space.objectives],
        )
    except BaseException:
        with session_scope(url) as s:  # nothing stored half-way
            job = s.get(JobModel, job_id)
            if job is not None:
                s.delete(job)
        raise
    return job_id


def space_of_job(job: JobModel) -> SearchSpace:
    data = dict(job.space)
    base = Path(data.pop("base_dir", "."))
    data.pop("hardware", None)
    return parse_space(data, base_dir=base, source=f"(job {job.job_id})")


def hardware_fingerprint(device: str) -> str:
    """What a warm start must match: CPU model and count, and the accelerator's name."""
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out = f"{cpu} x{os.cpu_count()}"
    if device == "cuda":
        import shutil
        import subprocess

        if shutil.which("nvidia-smi"):
            try:
                gpus = subprocess.run(
                    ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                    capture_output=True, text=True, timeout=10, check=True,
                ).stdout.strip().replace("\n", ", ")  # fmt: skip
                out += f" / {gpus}"
            except (OSError, subprocess.SubprocessError):
                pass
    return f"{out} / {device}"


# --------------------------------------------------------------------------- sampling


def other_targets(space: SearchSpace) -> list[str]:
    """Checkpoints (as written in the space) that some method serves instead of engine.model.
    Each is another target: measured with its own baseline, reported apart."""
    m = space.methods.mtp
    if m is not None and m.model and space.resolve(m.model) != space.resolve(space.engine.model):
        return [m.model]
    return []


def sample_candidate(trial: optuna.trial.BaseTrial, space: SearchSpace) -> dict[str, Any]:
    """Define-by-run: a parameter exists only where it means something."""
    methods = ["none", *space.methods.enabled()]
    method = trial.suggest_categorical("method", methods)
    params: dict[str, Any] = {"method": method}
    if method == "none":
        others = other_targets(space)
        if others:
            t = trial.suggest_categorical("none.target", [space.engine.model, *others])
            if t != space.engine.model:
                params["target"] = t
    elif method == "ngram":
        m = space.methods.ngram
        assert m is not None
        k = trial.suggest_int(
            "ngram.num_speculative_tokens",
            m.num_speculative_tokens.min,
            m.num_speculative_tokens.max,
        )
        pmin = trial.suggest_int(
            "ngram.prompt_lookup_min", m.prompt_lookup_min.min, m.prompt_lookup_min.max
        )
        pmax = trial.suggest_int(
            "ngram.prompt_lookup_max", m.prompt_lookup_max.min, m.prompt_lookup_max.max
        )
        params.update(
            num_speculative_tokens=k, prompt_lookup_min=pmin, prompt_lookup_max=max(pmin, pmax)
        )
    elif method == "draft_model":
        m = space.methods.draft_model
        assert m is not None
        k = trial.suggest_int(
            "draft_model.num_speculative_tokens",
            m.num_speculative_tokens.min,
            m.num_speculative_tokens.max,
        )
        draft = trial.suggest_categorical("draft_model.draft", m.drafts)
        params.update(num_speculative_tokens=k, draft=draft)
    elif method in ("eagle", "eagle3"):
        h = getattr(space.methods, method)
        k = trial.suggest_int(
            f"{method}.num_speculative_tokens",
            h.num_speculative_tokens.min,
            h.num_speculative_tokens.max,
        )
        params.update(num_speculative_tokens=k,
                      head=trial.suggest_categorical(f"{method}.head", h.heads))  # fmt: skip
    elif method == "mtp":
        mt = space.methods.mtp
        assert mt is not None
        params["num_speculative_tokens"] = trial.suggest_int(
            "mtp.num_speculative_tokens",
            mt.num_speculative_tokens.min,
            mt.num_speculative_tokens.max,
        )
        if other_targets(space):
            params["target"] = mt.model
    params["max_num_seqs"] = trial.suggest_categorical("max_num_seqs", space.max_num_seqs)
    params["memory_fraction"] = trial.suggest_categorical("memory_fraction", space.memory_fraction)
    return params


def baseline_params(space: SearchSpace, target: str | None = None) -> dict[str, Any]:
    """Optuna parameters of the baseline on engine.model, or on another target."""
    d: dict[str, Any] = {
        "method": "none",
        "max_num_seqs": space.max_num_seqs[0],
        "memory_fraction": space.memory_fraction[0],
    }
    if other_targets(space):
        d["none.target"] = target or space.engine.model
    return d


def start_params(space: SearchSpace) -> list[dict[str, Any]]:
    """Optuna parameter dicts for ``start_with`` (unset fields: the first choice)."""
    out = []
    for sp in space.start_with:
        m = sp.method
        d: dict[str, Any] = {
            "method": m,
            f"{m}.num_speculative_tokens": sp.num_speculative_tokens,
            "max_num_seqs": sp.max_num_seqs or space.max_num_seqs[0],
            "memory_fraction": sp.memory_fraction or space.memory_fraction[0],
        }
        if m == "ngram":
            ng = space.methods.ngram
            assert ng is not None
            d["ngram.prompt_lookup_min"] = sp.prompt_lookup_min or ng.prompt_lookup_min.min
            d["ngram.prompt_lookup_max"] = sp.prompt_lookup_max or ng.prompt_lookup_max.max
        elif m == "draft_model":
            dm = space.methods.draft_model
            assert dm is not None
            d["draft_model.draft"] = sp.draft or dm.drafts[0]
        elif m in ("eagle", "eagle3"):
            d[f"{m}.head"] = sp.head or getattr(space.methods, m).heads[0]
        out.append(d)
    return out


def config_to_params(c: dict[str, Any], space: SearchSpace) -> dict[str, Any] | None:
    """A trial's ``params`` as Optuna parameters of ``space``; None when outside it."""
    m = c.get("method")
    if c.get("max_num_seqs") not in space.max_num_seqs:
        return None
    if c.get("memory_fraction") not in space.memory_fraction:
        return None
    d: dict[str, Any] = {"method": m, "max_num_seqs": c["max_num_seqs"],
                         "memory_fraction": c["memory_fraction"]}  # fmt: skip
    others = other_targets(space)
    if m == "none":
        if c.get("target") not in (None, *others):
            return None
        if others:
            d["none.target"] = c.get("target") or space.engine.model
        return d
    spec = getattr(space.methods, m, None) if m in space.methods.enabled() else None
    if spec is None:
        return None
    k = c.get("num_speculative_tokens")
    if k not in spec.num_speculative_tokens.values():
        return None
    d[f"{m}.num_speculative_tokens"] = k
    if m == "ngram":
        lo, hi = c.get("prompt_lookup_min"), c.get("prompt_lookup_max")
        if lo not in spec.prompt_lookup_min.values() or hi not in spec.prompt_lookup_max.values():
            return None
        d["ngram.prompt_lookup_min"], d["ngram.prompt_lookup_max"] = lo, hi
    elif m == "draft_model":
        if c.get("draft") not in spec.drafts:
            return None
        d["draft_model.draft"] = c["draft"]
    elif m in ("eagle", "eagle3"):
        if c.get("head") not in spec.heads:
            return None
        d[f"{m}.head"] = c["head"]
    elif c.get("target") != (spec.model if others else None):
        return None  # mtp served from another checkpoint than this space's
    return d


def warm_start_params(url: str, job_id: int, space: SearchSpace) -> list[dict[str, Any]]:
    """The best configurations of earlier succeeded jobs on the same target, engine kind,
    device and hardware, that lie in this space (best first)."""
    from tuner.pareto import _score, job_report

    if space.warm_start <= 0:
        return []
    me = (space.resolve(space.engine.model), space.engine.kind,
          hardware_fingerprint(space.engine.device))  # fmt: skip
    with session_scope(url) as s:
        earlier = []
        for j in s.scalars(
            select(JobModel)
            .where(JobModel.job_id != job_id, JobModel.state == "succeeded")
            .order_by(JobModel.job_id.desc())
        ):
            try:
                js = space_of_job(j)
            except Exception:
                continue  # a job stored by an older schema: not a safe hint
            key = (js.resolve(js.engine.model), js.engine.kind, j.space.get("hardware"))
            if key == me and js.engine.kind != "replay":
                earlier.append(j.job_id)
    ranked: list[tuple[float, dict[str, Any]]] = []
    for jid in earlier:
        rep = job_report(url, jid)
        name, direction = rep.objectives[0]
        sign = -1.0 if direction == "maximize" else 1.0
        for p in rep.front:
            if p.method != "none":
                ranked.append((sign * _score(p, name), p.params))
    out: list[dict[str, Any]] = []
    for _, c in sorted(ranked, key=lambda x: x[0]):
        d = config_to_params(c, space)
        if d is not None and d not in out:
            out.append(d)
        if len(out) >= space.warm_start:
            break
    return out


def speculative_config(params: dict[str, Any], space: SearchSpace) -> dict[str, Any] | None:
    method = params["method"]
    if method == "none":
        return None
    spec: dict[str, Any] = {"method": method}
    if method == "draft_model":
        spec["model"] = space.resolve(params["draft"])
    elif method in ("eagle", "eagle3"):
        spec["model"] = space.resolve(params["head"])
    spec["num_speculative_tokens"] = params["num_speculative_tokens"]
    if method == "ngram":
        spec["prompt_lookup_min"] = params["prompt_lookup_min"]
        spec["prompt_lookup_max"] = params["prompt_lookup_max"]
    return spec


def engine_config(params: dict[str, Any], space: SearchSpace) -> EngineConfig:
    e = space.engine
    return EngineConfig(
        model=space.resolve(params.get("target") or e.model),
        served_model_name=e.served_model_name,
        max_model_len=e.max_model_len,
        max_num_seqs=params["max_num_seqs"],
        memory_fraction=params["memory_fraction"],
        speculative_config=speculative_config(params, space),
        enforce_eager=e.enforce_eager,
        cpu_kvcache_gib=e.cpu_kvcache_gib,
        device=e.device,
        dtype=e.dtype,
        extra_args=tuple(e.extra_args),
    )


# --------------------------------------------------------------------------- measuring


def load_all_prompts(space: SearchSpace) -> dict[str, list[Prompt]]:
    out = {}
    for wl in space.all_workloads:
        path = builtin_path(wl.builtin) if wl.builtin else Path(space.resolve(wl.path or ""))
        out[wl.name] = read_jsonl(path)
    return out


def _objective_stats_noise(agg: dict[str, Any], space: SearchSpace) -> float:
    """Largest relative MAD among the objective metrics (the ones a decision rests on)."""
    rel = 0.0
    for o in space.objectives:
        st = agg["stats"].get(o.metric)
        if st is not None:
            rel = max(rel, relative_mad(st))
    return rel


def _measure_point(
    server: VLLMServer, space: SearchSpace, wl: WorkloadSpec, prompts: list[Prompt], level: int
) -> dict[str, Any]:
    """N repeats at one (workload, level); a too-noisy set is thrown away and measured again."""
    ms = space.measurement
    remeasured = 0
    while True:
        runs: list[Measurement] = []
        resets = 0
        for r in range(ms.repeats):
            if ms.reset_prefix_cache and server.kind != "hosted":
                resets += asyncio.run(reset_prefix_cache(server.base_url, server.kind))
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
                        engine=server.kind,
                        headers=getattr(server, "headers", None),
                    )
                )
            )
            if not server.alive():
                raise TrialFailed("crash", "engine died during measurement\n" + server.log_tail())
        agg = aggregate(runs, remeasured=remeasured)
        noise = _objective_stats_noise(agg, space)
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


class _Hosted:
    """A hosted endpoint in the place of a launched server: nothing to start, stop or reset;
    the key travels only in the request headers."""

    kind = "hosted"

    def __init__(self, base_url: str, headers: dict[str, str] | None) -> None:
        self.base_url, self.headers = base_url, headers

    def alive(self) -> bool:
        return True

    def log_tail(self, max_bytes: int = 0) -> str:
        return ""


def measure_references(
    url: str, job_id: int, space: SearchSpace, prompts: dict[str, list[Prompt]]
) -> None:
    """Measure each hosted endpoint once per job (a resumed job keeps what it has): every
    workload and level, same repeats and load generator as the trials. A missing key or an
    unreachable endpoint is stored as a failed reference with its reason, not a job failure."""
    import os

    with session_scope(url) as s:
        done = set(s.scalars(select(ReferenceModel.name).where(ReferenceModel.job_id == job_id)))
    for h in space.hosted:
        if h.name in done:
            continue
        row = ReferenceModel(job_id=job_id, name=h.name, base_url=h.root, model=h.model,
                             state="complete", measurements=[])  # fmt: skip
        headers = None
        if h.api_key_env:
            key = os.environ.get(h.api_key_env)
            if not key:
                row.state, row.error = "fail", f"environment variable {h.api_key_env} is not set"
            else:
                headers = {"Authorization": f"Bearer {key}"}
        if row.state == "complete":
            server = _Hosted(h.root, headers)
            hosted_space = space.model_copy(
                update={"engine": space.engine.model_copy(update={"served_model_name": h.model})}
            )
            try:
                for wl in space.all_workloads:
                    for level in space.concurrency:
                        m = _measure_point(server, hosted_space, wl, prompts[wl.name], level)  # type: ignore[arg-type]
                        m["hosted"] = h.name
                        row.measurements = [*row.measurements, m]
                        if m["num_ok"] == 0:
                            raise LoadError(f"every request failed: {m.get('errors')}")
            except (LoadError, OSError) as e:
                row.state, row.error = "fail", str(e)[:2000]
        with session_scope(url) as s:
            s.add(row)


def _measure_all(
    server: VLLMServer,
    space: SearchSpace,
    prompts: dict[str, list[Prompt]],
    after_primary: Callable[[dict[str, Any]], str | None] | None = None,
) -> list[dict[str, Any]]:
    """Every workload x every concurrency level on one running engine (no restart). The
    objective point is measured first: ``after_primary`` may stop the rest (pruning)."""
    wls = {wl.name: wl for wl in space.all_workloads}
    order = [(space.primary_workload, space.primary_concurrency)] + [
        (wl.name, level)
        for wl in space.all_workloads
        for level in space.concurrency
        if (wl.name, level) != (space.primary_workload, space.primary_concurrency)
    ]
    out = []
    for name, level in order:
        out.append(_measure_point(server, space, wls[name], prompts[name], level))
        if len(out) == 1 and after_primary is not None:
            evidence = after_primary(out[0])
            if evidence is not None:
                raise _Pruned(evidence, out)
    return out


class _Pruned(Exception):
    """The objective point is clearly dominated: the trial stops with what it measured."""

    def __init__(self, evidence: str, measurements: list[dict[str, Any]]) -> None:
        super().__init__(evidence)
        self.evidence = evidence
        self.measurements = measurements
        self.extra: dict[str, Any] = {}


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
        hi, lo = ("ci95_high", "ci95_low") if direction == "maximize" else ("ci95_low",
                                                                            "ci95_high")
        mine, theirs = _bound(m, name, hi), _bound(other, name, lo)
        if mine is None or theirs is None:
            return False
        if direction == "maximize":
            if theirs < mine:
                return False
            strict = strict or theirs > mine
        else:
            if theirs > mine:
                return False
            strict = strict or theirs < mine
    return strict


def _interval_text(m: dict[str, Any], objectives: list[tuple[str, str]]) -> str:
    parts = []
    for name, _ in objectives:
        lo, hi = _bound(m, name, "ci95_low"), _bound(m, name, "ci95_high")
        if lo is None or hi is None:
            parts.append(f"{name} {m.get(name)}")
        else:
            parts.append(f"{name} {m.get(name, float('nan')):.2f} [{lo:.2f}-{hi:.2f}]")
    return ", ".join(parts)


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


_KV_RE = re.compile(r"(?:CPU|GPU) KV cache size: ([\d,]+) tokens")


def kv_cache_tokens(log_text: str) -> int | None:
    """The KV-cache capacity the engine reported at start."""
    m = _KV_RE.findall(log_text)
    return int(m[-1].replace(",", "")) if m else None


class _RssSampler(threading.Thread):
    """Peak resident memory of the engine's process tree (CPU memory; on a GPU the weights
    and cache live in device memory, read from the engine log instead)."""

    def __init__(self, server: VLLMServer, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.server, self.every_s = server, every_s
        self.peak_bytes = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psutil

        while not self.done.is_set():
            proc = self.server.proc
            if proc is None:
                break
            try:
                root = psutil.Process(proc.pid)
                procs = [root, *root.children(recursive=True)]
                total = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak_bytes = max(self.peak_bytes, total)
            except psutil.Error:
                pass
            self.done.wait(self.every_s)


# --------------------------------------------------------------------------- the job


class _Objective:
    def __init__(
        self,
        url: str,
        job_id: int,
        space: SearchSpace,
        work_dir: Path,
        prompts: dict[str, list[Prompt]],
        n_trials: int,
        on_trial: Callable[[TrialEvent], None] | None,
        on_start: Callable[[int, dict[str, Any]], None] | None,
        launcher: list[str] | None = None,
        control: JobControl | None = None,
    ) -> None:
        self.control = control or JobControl()
        self.url, self.job_id, self.space = url, job_id, space
        self.launcher = launcher
        self.work_dir, self.prompts, self.n_trials = work_dir, prompts, n_trials
        self.on_trial, self.on_start = on_trial, on_start
        self._replay_engine: Any = None
        self.log_dir = work_dir / "logs" / log_folder(url, job_id)

    def __call__(self, trial: optuna.Trial) -> list[float]:
        if self.control.cancelled:
            raise JobCancelled("job cancelled")
        t0 = time.monotonic()
        params = sample_candidate(trial, self.space)
        cfg = engine_config(params, self.space)
        if self.on_start:
            self.on_start(trial.number, params)
        with session_scope(self.url) as s:
            row = TrialModel(
                job_id=self.job_id,
                number=trial.number,
                state="running",
                method=params["method"],
                params=params,
                engine_config=cfg.to_dict(),
                engine_key=cfg.key(),
            )
            s.add(row)
            s.flush()
            trial_id = row.trial_id
        trial.set_user_attr("spectune_trial_id", trial_id)
        try:
            measurements, extra = self._run(trial, cfg, params)
            primary = next(
                m
                for m in measurements
                if m["concurrency"] == self.space.primary_concurrency
                and m["workload"] == self.space.primary_workload
            )
            cons = constraint_values(primary, self.space.slo.limits())
            rate = extra.get("lossless_match_rate")
            if rate is not None and self.space.lossless.enabled:
                cons["lossless"] = self.space.lossless.min_match_rate - rate
            for k, v in cons.items():
                trial.set_constraint(k, v)
            values = objective_values(primary, self.space)
        except TrialFailed as e:
            self._finish(trial_id, "fail", reason=e.reason, detail=e.detail)
            self._emit(trial.number, "fail", params, t0, f"{e.reason}")
            raise
        except _Pruned as e:
            self._store(trial_id, e.measurements, e.extra, state="pruned")
            self._finish(trial_id, "pruned", reason="pruned", detail=e.evidence)
            self._emit(trial.number, "pruned", params, t0, e.evidence)
            raise optuna.TrialPruned(e.evidence) from None
        except BaseException as e:  # interrupted: keep the record honest
            reason = "cancelled" if isinstance(e, JobCancelled) else "interrupted"
            self._finish(trial_id, "fail", reason=reason, detail=repr(e))
            raise
        self._store(trial_id, measurements, extra, state="complete")
        acc = primary.get("acceptance_rate")
        rate = extra.get("lossless_match_rate")
        self._emit(
            trial.number,
            "complete",
            params,
            t0,
            f"{primary['output_tok_per_s']:.1f} tok/s, p99 TPOT "
            f"{primary.get('p99_tpot_ms') or float('nan'):.2f} ms"
            + (f", acceptance {acc:.1%}" if acc is not None else "")
            + (f", greedy match {rate:.0%}" if rate is not None else "")
            + (" (noisy)" if primary.get("noisy") else "")
            + (
                f" (reused trial {extra['reused_from']})"
                if extra.get("reused_from") is not None
                else ""
            ),
        )
        return values

    def _store(
        self, trial_id: int, measurements: list[dict], extra: dict[str, Any], *, state: str
    ) -> None:
        with session_scope(self.url) as s:
            row = s.get(TrialModel, trial_id)
            assert row is not None
            for m in measurements:
                row.measurements.append(
                    MeasurementModel(
                        workload=m["workload"],
                        concurrency=m["concurrency"],
                        output_tok_per_s=m["output_tok_per_s"],
                        p99_tpot_ms=m.get("p99_tpot_ms"),
                        num_failed=m["num_failed"],
                        metrics=m,
                    )
                )
            row.startup_s = extra.get("startup_s")
            row.log_path = extra.get("log_path")
            row.reused_from = extra.get("reused_from")
            row.kv_cache_tokens = extra.get("kv_cache_tokens")
            row.peak_rss_mb = extra.get("peak_rss_mb")
            row.greedy_token_ids = extra.get("greedy_token_ids")
            row.lossless_match_rate = extra.get("lossless_match_rate")
            row.state = state
            row.finished_at = utcnow()

    def _objective_points(self, model: str) -> list[tuple[int, dict, dict, float | None]]:
        """(number, params, metrics, greedy match) of each complete, launched trial on one
        target, at the objective point (first workload, objective concurrency)."""
        point = (self.space.primary_workload, self.space.primary_concurrency)
        with session_scope(self.url) as s:
            rows = s.scalars(
                select(TrialModel).where(
                    TrialModel.job_id == self.job_id,
                    TrialModel.state == "complete",
                    TrialModel.reused_from.is_(None),
                )
            ).all()
            return [
                (r.number, dict(r.params), dict(m.metrics), r.lossless_match_rate)
                for r in rows
                if r.engine_config.get("model") == model  # another target is never compared
                for m in r.measurements
                if (m.workload, m.concurrency) == point
            ]

    def _prune_check(self, m: dict[str, Any], model: str) -> str | None:
        """Evidence that the objective point is clearly dominated by a feasible trial
        already measured in this job on the same target, or None. (Optuna's pruners take one
        intermediate value and do not support multi-objective studies, so the rule is ours:
        95% intervals.)"""
        from tuner.pareto import feasible

        objectives = [(o.metric, o.resolved_direction) for o in self.space.objectives]
        limits = self.space.slo.limits()
        ll = self.space.lossless
        others = [(n, om, rate) for n, _, om, rate in self._objective_points(model)]
        for number, om, rate in others:
            ok, _ = feasible(om, limits, lossless_match_rate=rate,
                             min_match_rate=ll.min_match_rate if ll.enabled else None)
            if ok and dominated_by(m, om, objectives):
                return (
                    f"pruned after concurrency {self.space.primary_concurrency}: "
                    f"{_interval_text(m, objectives)} is dominated by trial {number} "
                    f"({_interval_text(om, objectives)}) even at the favourable end of its 95% "
                    "interval; the other levels and the lossless check were skipped"
                )  # fmt: skip
        return None

    def _emit(self, number: int, state: str, params: dict, t0: float, summary: str) -> None:
        if self.on_trial:
            self.on_trial(
                TrialEvent(
                    number,
                    self.n_trials,
                    state,
                    params["method"],
                    params,
                    time.monotonic() - t0,
                    summary,
                )
            )

    def _finish(
        self,
        trial_id: int,
        state: str,
        *,
        reason: str | None = None,
        detail: str | None = None,
        log_path: str | None = None,
    ) -> None:
        with session_scope(self.url) as s:
            row = s.get(TrialModel, trial_id)
            assert row is not None
            row.state = state
            row.fail_reason = reason
            row.fail_detail = detail[-LOG_TAIL_CHARS:] if detail else None
            if log_path:
                row.log_path = log_path
            row.finished_at = utcnow()

    def _previous(self, key: str, number: int) -> TrialModel | None:
        with session_scope(self.url) as s:
            rows = s.scalars(
                select(TrialModel)
                .where(
                    TrialModel.job_id == self.job_id,
                    TrialModel.engine_key == key,
                    TrialModel.number < number,
                    TrialModel.state.in_(["complete", "fail", "pruned"]),
                    TrialModel.reused_from.is_(None),
                )
                .order_by(TrialModel.number)
            ).all()
            # An interrupted or cancelled trial says nothing about its configuration.
            rows = [r for r in rows if r.fail_reason not in ("interrupted", "cancelled")]
            for r in rows:
                _ = r.measurements  # load while the session is open
            return rows[-1] if rows else None

    def _baseline_reference(self, model: str) -> list[Any] | None:
        """Greedy outputs of the baseline on the same target (another checkpoint, such as an
        MTP model, is checked against its own baseline)."""
        with session_scope(self.url) as s:
            rows = s.scalars(
                select(TrialModel)
                .where(
                    TrialModel.job_id == self.job_id,
                    TrialModel.method == "none",
                    TrialModel.greedy_token_ids.is_not(None),
                )
                .order_by(TrialModel.number)
            ).all()
            row = next((r for r in rows if r.engine_config.get("model") == model), None)
            return row.greedy_token_ids if row is not None else None

    def _lossless(self, server: VLLMServer, cfg: EngineConfig) -> dict[str, Any]:
        ll = self.space.lossless
        if not ll.enabled:
            return {}
        first = self.space.all_workloads[0].name
        prompts = [p.prompt for p in self.prompts[first][: ll.num_prompts]]
        ids = asyncio.run(
            greedy_token_ids(server.base_url, self.space.engine.served_model_name, prompts,
                             ll.max_tokens, engine=server.kind)
        )  # fmt: skip
        out: dict[str, Any] = {"greedy_token_ids": ids}
        if cfg.speculative_config is not None:
            ref = self._baseline_reference(cfg.model)
            out["lossless_match_rate"] = lossless_match(ref, ids) if ref is not None else None
        return out

    def _run(
        self, trial: optuna.Trial, cfg: EngineConfig, params: dict[str, Any]
    ) -> tuple[list[dict], dict]:
        prev = self._previous(cfg.key(), trial.number)
        if prev is not None:
            # The same engine configuration was already measured in this job: reuse, no launch,
            # and steer the next trial to an unmeasured neighbour instead of a third repeat.
            self._enqueue_neighbour(trial, params)
            if prev.state == "pruned":
                p = _Pruned(f"same configuration as trial {prev.number}, pruned: "
                            f"{prev.fail_detail}", [dict(m.metrics) for m in prev.measurements])
                p.extra = {"reused_from": prev.number}
                raise p  # fmt: skip
            if prev.state == "fail":
                raise TrialFailed(
                    prev.fail_reason or "crash",
                    f"same configuration as trial {prev.number}, which failed: "
                    + (prev.fail_detail or ""),
                )
            ms = [dict(m.metrics) for m in prev.measurements]
            return ms, {
                "reused_from": prev.number,
                "kv_cache_tokens": prev.kv_cache_tokens,
                "peak_rss_mb": prev.peak_rss_mb,
                "lossless_match_rate": prev.lossless_match_rate,
            }
        if self.space.engine.kind == "replay":
            return self._replay(params)
        try:
            preflight(cfg)
        except PreflightError as e:
            raise TrialFailed("invalid_config", f"pre-flight: {e}") from None
        log_path = self.log_dir / f"trial-{trial.number}.log"
        try:
            return self.launch_and_measure(cfg, log_path, prune=self.space.measurement.prune)
        except TrialFailed:
            self._finish_log(trial, log_path)
            raise

    def _enqueue_neighbour(self, trial: optuna.Trial, params: dict[str, Any]) -> None:
        """After the sampler proposed a configuration already measured, enqueue the nearest
        unmeasured one (fewest parameters changed, ties broken by the job's seed): the
        sampler thinks this region is good, so its neighbours are the useful next launch."""
        import random

        from tuner.surface import grid_params, params_to_config

        if trial.number + 1 >= self.n_trials:
            return  # no trial left to use it (a waiting trial would outlive the job)
        study = trial.study
        seen = {json.dumps(r, sort_keys=True) for r in self._measured_params()}
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            fixed = t.system_attrs.get("fixed_params")
            if fixed:
                seen.add(json.dumps(params_to_config(fixed, self.space), sort_keys=True))
        fresh = [
            p
            for p in grid_params(self.space)
            if json.dumps(params_to_config(p, self.space), sort_keys=True) not in seen
        ]
        if not fresh:
            return

        def distance(p: dict[str, Any]) -> int:
            c = params_to_config(p, self.space)
            keys = set(c) | set(params)
            return sum(c.get(k) != params.get(k) for k in keys)

        # Around the incumbent (the best measured so far on the first objective) first: the
        # sampler repeating itself means it has little new to say, and one-parameter moves
        # from the best point are what an engineer would try next.
        inc = self._incumbent()
        if inc is not None:
            params = inc
        best = min(distance(p) for p in fresh)
        near = [p for p in fresh if distance(p) == best]
        pick = random.Random(self.space.seed * 7919 + trial.number).choice(near)
        study.enqueue_trial(pick)

    def _incumbent(self) -> dict[str, Any] | None:
        """The best configuration measured so far on the first objective (engine.model)."""
        o = self.space.objectives[0]
        sign = -1.0 if o.resolved_direction == "maximize" else 1.0
        best: tuple[float, dict[str, Any]] | None = None
        for _, params, m, _ in self._objective_points(self.space.resolve(self.space.engine.model)):
            v = (m.get("score") or {}).get(o.metric, m.get(o.metric))
            if v is not None and (best is None or sign * v < best[0]):
                best = (sign * float(v), params)
        return None if best is None else best[1]

    def _measured_params(self) -> list[dict[str, Any]]:
        with session_scope(self.url) as s:
            rows = s.scalars(
                select(TrialModel.params).where(
                    TrialModel.job_id == self.job_id,
                    TrialModel.state.in_(["complete", "fail", "pruned", "running"]),
                )
            ).all()
        return [dict(r) for r in rows]

    def _replay(self, params: dict[str, Any]) -> tuple[list[dict], dict]:
        """Benchmarking the search: the trial's numbers come from a recorded surface."""
        from tuner.engines import ReplayEngine, ReplayMiss

        if self._replay_engine is None:
            self._replay_engine = ReplayEngine.open(self.space.resolve(self.space.engine.surface))
        first = (self.space.primary_workload, self.space.primary_concurrency)
        levels = [first] + [
            (wl.name, c)
            for wl in self.space.all_workloads
            for c in self.space.concurrency
            if (wl.name, c) != first
        ]
        try:
            ms, extra = self._replay_engine.measure(params, levels)
        except ReplayMiss as e:
            raise TrialFailed("not_recorded", str(e)) from None
        except EngineLaunchError as e:
            raise TrialFailed(e.reason, f"{e.message}\n{e.log_tail}") from None
        self._count_launch(extra.get("startup_s") or 0.0)
        if self.space.measurement.prune and params["method"] != "none":
            # levels start with the objective point
            evidence = self._prune_check(ms[0], engine_config(params, self.space).model)
            if evidence is not None:
                p = _Pruned(evidence, ms[:1])
                p.extra = {k: extra.get(k) for k in ("startup_s", "kv_cache_tokens")}
                raise p
        return ms, extra

    def launch_and_measure(
        self,
        cfg: EngineConfig,
        log_path: Path,
        *,
        lossless: bool = True,
        confirm: bool = False,
        prune: bool = False,
    ) -> tuple[list[dict], dict]:
        """One engine launch measuring every workload and level (and the lossless set)."""
        server_cls = SGLangServer if self.space.engine.kind == "sglang" else VLLMServer
        server = server_cls(
            cfg,
            log_path,
            cache_root=self.work_dir / "cache" / server_cls.kind,
            startup_timeout_s=self.space.engine.startup_timeout_s,
            launcher=self.launcher,
        )
        self.control._attach(server)
        sampler = _RssSampler(server)
        extra: dict[str, Any] = {}
        try:
            with server:
                self._count_launch(server.startup_s or 0.0, confirm=confirm)
                sampler.start()
                extra["kv_cache_tokens"] = kv_cache_tokens(server.log_tail(200_000))
                try:
                    hook = (functools.partial(self._prune_check, model=cfg.model)
                            if (prune and cfg.speculative_config) else None)  # fmt: skip
                    ms = _measure_all(server, self.space, self.prompts, hook)
                    if lossless:
                        extra.update(self._lossless(server, cfg))
                except (LoadError, OSError) as e:
                    detail = f"{e}\n--- engine log tail ---\n{server.log_tail()}"
                    raise TrialFailed(
                        "crash" if not server.alive() else "measurement", detail
                    ) from None
                if not server.alive():
                    raise TrialFailed(
                        "crash", "engine died during measurement\n" + server.log_tail()
                    )
        except _Pruned as e:
            e.extra = {"startup_s": server.startup_s, "log_path": str(log_path),
                       "kv_cache_tokens": extra.get("kv_cache_tokens")}  # fmt: skip
            raise
        except (EngineLaunchError, TrialFailed) as e:
            if self.control.cancelled:
                raise JobCancelled("job cancelled while its engine ran") from None
            if isinstance(e, TrialFailed):
                raise
            self._count_launch(0.0, confirm=confirm)
            raise TrialFailed(
                e.reason, f"{e.message}\n--- engine log tail ---\n{e.log_tail}"
            ) from None
        finally:
            self.control._attach(None)
            sampler.done.set()
        if self.control.cancelled:
            raise JobCancelled("job cancelled while its engine ran")
        extra["peak_rss_mb"] = round(sampler.peak_bytes / 2**20, 1) if sampler.peak_bytes else None
        extra.update(startup_s=server.startup_s, log_path=str(log_path))
        return ms, extra

    def _finish_log(self, trial: optuna.Trial, log_path: Path) -> None:
        tid = trial.user_attrs.get("spectune_trial_id")
        if tid is None:
            return
        with session_scope(self.url) as s:
            row = s.get(TrialModel, tid)
            if row is not None:
                row.log_path = str(log_path)

    def _count_launch(self, startup_s: float, *, confirm: bool = False) -> None:
        with session_scope(self.url) as s:
            job = s.get(JobModel, self.job_id)
            assert job is not None
            if confirm:
                job.confirm_launches += 1
            else:
                job.engine_launches += 1
            job.engine_startup_s += startup_s

    def _trial_row(self, s: Session, number: int) -> TrialModel:
        q = select(TrialModel).where(TrialModel.job_id == self.job_id, TrialModel.number == number)
        return s.scalars(q).one()

    def confirm(self) -> list[int]:
        """Re-launch the best front configurations (and the baseline) and measure them
        again; their stored numbers become the confirmed ones, the search's are kept under
        ``search``. Returns the confirmed trial numbers."""
        from tuner.pareto import _score, job_report

        k = self.space.measurement.confirm_top
        if k <= 0 or self.space.engine.kind == "replay":
            return []  # a replay has nothing to re-launch
        rep = job_report(self.url, self.job_id)
        name, direction = rep.objectives[0]
        sign = -1.0 if direction == "maximize" else 1.0
        ranked = sorted(
            (p for p in rep.front if p.method != "none"), key=lambda p: sign * _score(p, name)
        )
        chosen = [p.trial_number for p in ranked[:k]]
        if not chosen:
            return []
        if rep.baseline is not None:
            chosen.append(rep.baseline.trial_number)
        done = []
        for number in chosen:
            if self.control.cancelled:
                break
            with session_scope(self.url) as s:
                row = self._trial_row(s, number)
                cfg = EngineConfig.from_dict(row.engine_config)
            log_path = self.log_dir / f"confirm-{number}.log"
            if self.on_start:
                self.on_start(number, {"confirm": True, **row.params})
            t0 = time.monotonic()
            try:
                ms, _extra = self.launch_and_measure(cfg, log_path, lossless=False, confirm=True)
            except TrialFailed as e:
                log.warning("confirmation of trial %s failed: %s", number, e)
                continue
            with session_scope(self.url) as s:
                row = self._trial_row(s, number)
                new = {(m["workload"], m["concurrency"]): m for m in ms}
                for mrow in row.measurements:
                    m = new.get((mrow.workload, mrow.concurrency))
                    if m is None:
                        continue
                    old = dict(mrow.metrics)
                    m = dict(m)
                    m["confirmed"] = True
                    m["search"] = {key: old.get(key) for key in _SEARCH_KEYS}
                    mrow.metrics = m
                    mrow.output_tok_per_s = m["output_tok_per_s"]
                    mrow.p99_tpot_ms = m.get("p99_tpot_ms")
                    mrow.num_failed = m["num_failed"]
            done.append(number)
            if self.on_trial:
                m = new.get((self.space.primary_workload, self.space.primary_concurrency), {})
                self.on_trial(
                    TrialEvent(number, self.n_trials, "confirmed", row.method, row.params,
                               time.monotonic() - t0,
                               f"{m.get('output_tok_per_s', 0):.1f} tok/s, p99 TPOT "
                               f"{m.get('p99_tpot_ms') or float('nan'):.2f} ms")
                )  # fmt: skip
        return done


_SEARCH_KEYS = ("output_tok_per_s", "p99_tpot_ms", "mean_tpot_ms", "p99_ttft_ms",
                "acceptance_rate", "stats", "score", "noisy", "relative_mad")  # fmt: skip


def run_job(
    url: str,
    job_id: int,
    *,
    work_dir: Path | None = None,
    on_trial: Callable[[TrialEvent], None] | None = None,
    on_start: Callable[[int, dict[str, Any]], None] | None = None,
    launcher: list[str] | None = None,
    control: JobControl | None = None,
) -> JobModel:
    """Run a queued job to the end of its trial budget; returns the finished job row.

    ``control`` lets another thread cancel the job. ``launcher`` (tests only) replaces the
    engine's ``python -m …`` prefix. A job found ``running`` (its worker died) resumes:
    finished trials are kept and the budget counts them.
    """
    ensure_schema(url)
    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        if job is None:
            raise JobNotFound(f"job {job_id} not found")
        space = space_of_job(job)
        n_trials = job.n_trials
        job.state = "running"
        job.started_at = utcnow()
    work_dir = (work_dir or Path(".spectune")).resolve()
    try:
        prompts = load_all_prompts(space)
    except WorkloadError as e:
        _end_job(url, job_id, "failed", str(e))
        raise
    sampler = optuna.samplers.TPESampler(seed=space.seed, n_startup_trials=4)
    study = optuna.load_study(study_name=study_name_for(job_id), storage=url, sampler=sampler)
    _fail_orphaned_trials(url, job_id, study)
    if not study.trials:
        study.enqueue_trial(baseline_params(space))
        for target in other_targets(space):  # its own baseline, before any trial on it
            study.enqueue_trial(baseline_params(space, target))
        for params in start_params(space):
            study.enqueue_trial(params, skip_if_exists=True)
        for params in warm_start_params(url, job_id, space):
            study.enqueue_trial(params, skip_if_exists=True)
    if space.hosted and space.engine.kind != "replay":
        measure_references(url, job_id, space, prompts)
    objective = _Objective(
        url, job_id, space, work_dir, prompts, n_trials, on_trial, on_start, launcher, control
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        done = sum(1 for t in study.trials if t.state != optuna.trial.TrialState.WAITING)
        study.optimize(objective, n_trials=max(0, n_trials - done), catch=(TrialFailed,))
    except JobCancelled:
        _end_job(url, job_id, "cancelled", "cancelled")
        return _job_row(url, job_id)
    except KeyboardInterrupt:
        _end_job(url, job_id, "cancelled", "interrupted by the user")
        raise
    except Exception as e:
        _end_job(url, job_id, "failed", f"{type(e).__name__}: {e}")
        raise
    try:
        objective.confirm()
    except JobCancelled:
        _end_job(url, job_id, "cancelled", "cancelled")
        return _job_row(url, job_id)
    _end_job(url, job_id, "succeeded", None)
    return _job_row(url, job_id)


def _job_row(url: str, job_id: int) -> JobModel:
    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        assert job is not None
        return job


def _fail_orphaned_trials(url: str, job_id: int, study: optuna.Study) -> None:
    """Trials left running by a worker that died: one worker runs a job at a time, so the
    one resuming it knows they are dead. They become failed and the budget counts them."""
    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
    with session_scope(url) as s:
        rows = s.scalars(
            select(TrialModel).where(TrialModel.job_id == job_id, TrialModel.state == "running")
        ).all()
        for r in rows:
            r.state = "fail"
            r.fail_reason = "interrupted"
            r.fail_detail = "the worker running this trial stopped before it finished"
            r.finished_at = utcnow()


def _end_job(url: str, job_id: int, state: str, error: str | None) -> None:
    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        if job is not None:
            job.state = state
            job.error = error
            job.finished_at = utcnow()


def dump_space_yaml(space: SearchSpace) -> str:
    return yaml.safe_dump(space.model_dump(mode="json"), sort_keys=False)


def trial_records(url: str, job_id: int) -> list[dict[str, Any]]:
    """Each trial with Optuna's state, SpecTune's details and its metrics (units in names)."""
    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        if job is None:
            raise JobNotFound(f"job {job_id} not found")
        job_space = space_of_job(job)
        primary = job_space.primary_concurrency
        primary_wl = job_space.primary_workload
        rows = {
            r.number: r for r in s.scalars(select(TrialModel).where(TrialModel.job_id == job_id))
        }
        details = {
            n: {
                "params": r.params,
                "method": r.method,
                "fail_reason": r.fail_reason,
                "fail_detail": r.fail_detail,
                "log_path": r.log_path,
                "startup_s": r.startup_s,
                "reused_from": r.reused_from,
                "lossless_match_rate": r.lossless_match_rate,
                "kv_cache_tokens": r.kv_cache_tokens,
                "peak_rss_mb": r.peak_rss_mb,
                "measurements": [m.metrics for m in r.measurements],
            }
            for n, r in rows.items()
        }
    study = optuna.load_study(study_name=study_name_for(job_id), storage=url)
    out = []
    for t in study.get_trials(deepcopy=False):
        d = details.get(t.number, {})
        rec: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name.lower(),
            "method": d.get("method") or t.params.get("method"),
            "params": d.get("params") or dict(t.params),
            "fail_reason": d.get("fail_reason"),
            "fail_detail": d.get("fail_detail"),
            "log_path": d.get("log_path"),
            "startup_s": d.get("startup_s"),
            "reused_from": d.get("reused_from"),
            "lossless_match_rate": d.get("lossless_match_rate"),
            "kv_cache_tokens": d.get("kv_cache_tokens"),
            "peak_rss_mb": d.get("peak_rss_mb"),
            "constraints": dict(t.constraints),
            "concurrency": primary,
            "workload": primary_wl,
        }
        ms = d.get("measurements") or []
        prim = next(
            (m for m in ms if m["concurrency"] == primary and m["workload"] == primary_wl), None
        )
        if prim is not None:
            rec.update({k: v for k, v in prim.items() if k not in ("workload", "concurrency")})
        rec["measurements"] = ms
        out.append(rec)
    return out
