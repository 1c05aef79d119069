"""Recorded surfaces: every configuration of a space, measured for real, kept in one file.

Why: a search strategy is judged by how few engine launches it needs to find what a full grid
finds. Launches cost minutes, so strategies are compared on a *surface* recorded once from real
runs and replayed (``engine.kind: replay``), never on invented numbers.

Format (JSON Lines, UTF-8), ``spectune-surface/1``:

- line 1, the header: ``{"format": "spectune-surface/1", "space": {...}, "recorded": {...}}``.
  ``space`` is the search space the grid was taken from (its model dump: methods, ranges,
  workload, SLO, objectives); ``recorded`` says where and how (source job, database, host,
  engine version, UTC time). ``"replay": true`` never appears in a header: a surface is
  always recorded from real engines.
- then one row per measured point, in recording order::

    {"config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
                "prompt_lookup_max": 4, "max_num_seqs": 4, "memory_fraction": 0.15},
     "state": "complete", "workload": "code_completion", "concurrency": 1,
     "metrics": {... the stored measurement: medians, "stats" with ci95_low/ci95_high ...},
     "startup_s": 27.1, "kv_cache_tokens": 97280, "peak_rss_mb": 2101.3,
     "lossless_match_rate": 1.0}

  A configuration whose engine failed has one row with ``"state": "fail"``, its
  ``fail_reason`` and ``fail_detail`` and no workload, concurrency or metrics.

``config`` is exactly a trial's ``params`` (draft paths as written in the space), so a replay
finds a trial's row by equality.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tuner.space import SearchSpace, parse_space
from tuner.storage import JobModel, TrialModel, session_scope

__all__ = [
    "FORMAT",
    "Surface",
    "SurfaceError",
    "SurfacePoint",
    "config_key",
    "grid_configs",
    "grid_params",
    "read_surface",
    "write_surface",
]

FORMAT = "spectune-surface/1"


class SurfaceError(ValueError):
    """A surface file that cannot be used; the message names the line and the field."""


def config_key(config: dict[str, Any]) -> str:
    """Canonical identity of a configuration (order-free, floats as JSON writes them)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def grid_params(space: SearchSpace) -> list[dict[str, Any]]:
    """Every distinct candidate of the space, as Optuna parameter dicts (enqueue-ready).

    The order is the one a grid sweep walks: baseline first, then each method, depth,
    method parameters, batch size and memory fraction. ``prompt_lookup_max`` below
    ``prompt_lookup_min`` would be clamped to the same engine, so it is left out.
    """
    from tuner.study import baseline_params, other_targets

    out: list[dict[str, Any]] = []
    loads = [(s, f) for s in space.max_num_seqs for f in space.memory_fraction]
    for target in [None, *other_targets(space)]:
        for s, f in loads:
            out.append({**baseline_params(space, target), "max_num_seqs": s,
                        "memory_fraction": f})  # fmt: skip
    ng = space.methods.ngram
    if ng is not None:
        for k in ng.num_speculative_tokens.values():
            for lo in ng.prompt_lookup_min.values():
                for hi in ng.prompt_lookup_max.values():
                    if hi < lo:
                        continue
                    for s, f in loads:
                        out.append({
                            "method": "ngram",
                            "ngram.num_speculative_tokens": k,
                            "ngram.prompt_lookup_min": lo,
                            "ngram.prompt_lookup_max": hi,
                            "max_num_seqs": s,
                            "memory_fraction": f,
                        })  # fmt: skip
    dm = space.methods.draft_model
    if dm is not None:
        for k in dm.num_speculative_tokens.values():
            for d in dm.drafts:
                for s, f in loads:
                    out.append({
                        "method": "draft_model",
                        "draft_model.num_speculative_tokens": k,
                        "draft_model.draft": d,
                        "max_num_seqs": s,
                        "memory_fraction": f,
                    })  # fmt: skip
    for name in ("eagle", "eagle3"):
        hm = getattr(space.methods, name)
        if hm is None:
            continue
        for k in hm.num_speculative_tokens.values():
            for h in hm.heads:
                for s, f in loads:
                    out.append({"method": name, f"{name}.num_speculative_tokens": k,
                                f"{name}.head": h, "max_num_seqs": s,
                                "memory_fraction": f})  # fmt: skip
    mt = space.methods.mtp
    if mt is not None:
        for k in mt.num_speculative_tokens.values():
            for s, f in loads:
                out.append({"method": "mtp", "mtp.num_speculative_tokens": k,
                            "max_num_seqs": s, "memory_fraction": f})  # fmt: skip
    return out


def params_to_config(p: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """Optuna's namespaced parameter dict -> a trial's ``params`` (what a surface keys on):
    the same define-by-run code the study samples with, replayed on fixed values."""
    import optuna

    from tuner.study import sample_candidate

    return sample_candidate(optuna.trial.FixedTrial(p), space)


def grid_configs(space: SearchSpace) -> list[dict[str, Any]]:
    return [params_to_config(p, space) for p in grid_params(space)]


@dataclass(frozen=True)
class SurfacePoint:
    """One configuration's recorded outcome: measurements per (workload, level), or a failure."""

    config: dict[str, Any]
    state: str
    measurements: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    fail_reason: str | None = None
    fail_detail: str | None = None
    startup_s: float | None = None
    kv_cache_tokens: int | None = None
    peak_rss_mb: float | None = None
    lossless_match_rate: float | None = None


@dataclass
class Surface:
    path: Path
    header: dict[str, Any]
    points: dict[str, SurfacePoint]

    @property
    def space(self) -> SearchSpace:
        data = dict(self.header["space"])
        return parse_space(data, base_dir=self.path.parent, source=f"(surface {self.path})")

    def lookup(self, config: dict[str, Any]) -> SurfacePoint | None:
        return self.points.get(config_key(config))

    def __len__(self) -> int:
        return len(self.points)


def _rows_of_job(url: str, job_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        if job is None:
            raise SurfaceError(f"job {job_id} not found")
        space = {k: v for k, v in job.space.items() if k not in ("base_dir", "hardware")}
        engine_kind = (space.get("engine") or {}).get("kind", "vllm")
        if engine_kind == "replay":
            raise SurfaceError(f"job {job_id} was a replay: a surface is recorded from real runs")
        rows: list[dict[str, Any]] = []
        trials = s.scalars(
            select(TrialModel).where(TrialModel.job_id == job_id).order_by(TrialModel.number)
        ).all()
        seen: set[str] = set()
        for t in trials:
            if t.reused_from is not None or t.state not in ("complete", "fail"):
                continue
            if t.state == "fail" and t.fail_reason in ("interrupted", "cancelled"):
                continue  # not an outcome of the configuration
            key = config_key(t.params)
            if key in seen:
                continue
            seen.add(key)
            if t.state == "fail":
                rows.append({"config": t.params, "state": "fail", "fail_reason": t.fail_reason,
                             "fail_detail": (t.fail_detail or "")[-2000:]})  # fmt: skip
                continue
            for m in t.measurements:
                rows.append({
                    "config": t.params,
                    "state": "complete",
                    "workload": m.workload,
                    "concurrency": m.concurrency,
                    "metrics": m.metrics,
                    "startup_s": t.startup_s,
                    "kv_cache_tokens": t.kv_cache_tokens,
                    "peak_rss_mb": t.peak_rss_mb,
                    "lossless_match_rate": t.lossless_match_rate,
                })  # fmt: skip
        header = {
            "format": FORMAT,
            "space": space,
            "recorded": {
                "job_id": job_id,
                "job_state": job.state,
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "host": {"machine": platform.machine(), "processor": platform.processor(),
                         "python": platform.python_version()},  # fmt: skip
                "engine_launches": job.engine_launches,
                "engine_startup_s": job.engine_startup_s,
            },
        }
    return header, rows


def write_surface(url: str, job_id: int, path: Path, *, engine_version: str | None = None) -> int:
    """Write a job's real measurements as a surface file; returns the number of points."""
    header, rows = _rows_of_job(url, job_id)
    if engine_version:
        header["recorded"]["engine"] = engine_version
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w") as f:
        f.write(json.dumps(header) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    tmp.replace(path)  # never leave a half-written surface behind
    return len({config_key(r["config"]) for r in rows})


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text()
    except OSError as e:
        raise SurfaceError(f"cannot read surface {path}: {e.strerror}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise SurfaceError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise SurfaceError(f"{path}:{n}: each line must be a JSON object")
        yield n, obj


def read_surface(path: str | Path) -> Surface:
    """Load and check a surface; errors name the line and the field."""
    p = Path(path)
    it = _lines(p)
    first = next(it, None)
    if first is None:
        raise SurfaceError(f"{p}: empty file")
    _, header = first
    if header.get("format") != FORMAT:
        raise SurfaceError(f"{p}:1: format: expected {FORMAT!r}, got {header.get('format')!r}")
    if not isinstance(header.get("space"), dict):
        raise SurfaceError(f"{p}:1: space: missing (the search space the grid was taken from)")
    points: dict[str, SurfacePoint] = {}
    for n, row in it:
        cfg = row.get("config")
        if not isinstance(cfg, dict) or "method" not in cfg:
            raise SurfaceError(f"{p}:{n}: config: missing or without a method")
        state = row.get("state")
        key = config_key(cfg)
        if state == "fail":
            if key in points:
                raise SurfaceError(f"{p}:{n}: config: failed row for a configuration already seen")
            points[key] = SurfacePoint(cfg, "fail", fail_reason=str(row.get("fail_reason")),
                                       fail_detail=row.get("fail_detail"))  # fmt: skip
            continue
        if state != "complete":
            raise SurfaceError(f"{p}:{n}: state: expected 'complete' or 'fail', got {state!r}")
        for name in ("workload", "concurrency", "metrics"):
            if name not in row:
                raise SurfaceError(f"{p}:{n}: {name}: missing")
        metrics = row["metrics"]
        if not isinstance(metrics, dict) or "output_tok_per_s" not in metrics:
            raise SurfaceError(f"{p}:{n}: metrics: must hold at least output_tok_per_s")
        old = points.get(key)
        if old is not None and old.state == "fail":
            raise SurfaceError(f"{p}:{n}: config: measured row for a configuration that failed")
        if old is None:
            old = SurfacePoint(
                cfg, "complete", {}, startup_s=row.get("startup_s"),
                kv_cache_tokens=row.get("kv_cache_tokens"), peak_rss_mb=row.get("peak_rss_mb"),
                lossless_match_rate=row.get("lossless_match_rate"),
            )  # fmt: skip
            points[key] = old
        level = (str(row["workload"]), int(row["concurrency"]))
        if level in old.measurements:
            raise SurfaceError(
                f"{p}:{n}: concurrency: {level[0]} at {level[1]} recorded twice for one config"
            )
        old.measurements[level] = metrics
    if not points:
        raise SurfaceError(f"{p}: no measured points after the header")
    return Surface(p, header, points)
