"""Recorded surfaces: every configuration of a space, measured for real, kept in one file.

Why: a search strategy is judged by how few engine launches it needs to find what a full grid
finds. Launches cost minutes, so strategies are compared on a *surface* recorded once from real
runs and replayed (``engine.kind: replay``), never on invented numbers.

Format (JSON Lines, UTF-8), ``spectune-surface/1``:

- line 1, the header: ``{"format": "spectune-surface/1", "space": {...}, "recorded": {...}}``.
  ``space`` is the search space the grid was taken from (its model dump: methods, ranges,
  workload, SLO, objectives); ``recorded`` says where and how (source job, database, host,
  engine version, UTC time). ``"replay": true`` never appears in a header: a surface is
  always recorded from real engines -- except a SIMULATED one (below).
- optional, backward compatible: ``"simulated": true`` and a ``"simulation"`` object
  (generator, seed, cost model, citations, checks against published numbers) mark a
  surface written by a simulator (bench/make_sim_surface.py), never measured. Only the
  search benchmark (bench/search_efficiency.py) reads such files; their rows' ``metrics``
  also say ``"simulated": true``. ``Surface.simulated`` tells the two kinds apart.
- then one row per measured point, in recording order::

    {"config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
                "prompt_lookup_max": 4, "max_num_seqs": 4, "memory_fraction": 0.15},
     "state": "complete", "workload": "code_completion", "concurrency": 1,
     "metrics": {... the stored measurement: medians, "stats" with ci95_low/ci95_high ...},
     "startup_s": 27.1, "kv_cache_tokens": 97280, "peak_rss_mb": 2101.3,
     "lossless_match_rate": 1.0}

  ``metrics["runs"]`` lists every repeat of the point (at least ``output_tok_per_s``,
  ``p99_tpot_ms``, ``p99_ttft_ms``, ``acceptance_rate``, ``num_failed``, ``duration_s``); a
  row may keep more per repeat (any field of ``tuner.metrics.Measurement``: per-position
  acceptance, mean acceptance length, TPOT/ITL percentiles...). Readers ignore extra keys.

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

from tuner.space import SearchSpace, parse_space
from tuner.states import TrialState
from tuner.storage import Store

__all__ = [
    "FORMAT",
    "Surface",
    "SurfaceError",
    "SurfacePoint",
    "config_key",
    "read_surface",
    "surface_is_simulated",
    "write_surface",
]

FORMAT = "spectune-surface/1"


class SurfaceError(ValueError):
    """A surface file that cannot be used; the message names the line and the field."""


def config_key(config: dict[str, Any]) -> str:
    """Canonical identity of a configuration (order-free, floats as JSON writes them)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


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
    name: str = ""  # the path as messages show it (as the search space wrote it)

    @property
    def space(self) -> SearchSpace:
        data = dict(self.header["space"])
        return parse_space(data, base_dir=self.path.parent, source=f"(surface {self.path})")

    @property
    def simulated(self) -> bool:
        """Written by a simulator, not measured: never to be shown as a measurement."""
        return bool(self.header.get("simulated"))

    def lookup(self, config: dict[str, Any]) -> SurfacePoint | None:
        return self.points.get(config_key(config))

    def __len__(self) -> int:
        return len(self.points)


def _rows_of_job(store: Store, job_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    job = store.job(job_id)
    space = {k: v for k, v in job.space.items() if k not in ("base_dir", "hardware")}
    if (space.get("engine") or {}).get("surface"):
        raise SurfaceError(f"job {job_id} was a replay: a surface is recorded from real runs")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    finished = (TrialState.COMPLETE, TrialState.FAIL)
    for t in store.trials(job_id, states=finished, launched_only=True):
        if t.state == TrialState.FAIL and t.fail_reason in ("interrupted", "cancelled"):
            continue  # not an outcome of the configuration
        key = config_key(t.params)
        if key in seen:
            continue
        seen.add(key)
        if t.state == TrialState.FAIL:
            detail = (t.fail_detail or "")[-2000:]
            rows.append(
                {
                    "config": t.params,
                    "state": TrialState.FAIL,
                    "fail_reason": t.fail_reason,
                    "fail_detail": detail,
                }
            )
            continue
        for m in t.measurements:
            rows.append(
                {
                    "config": t.params,
                    "state": TrialState.COMPLETE,
                    "workload": m.workload,
                    "concurrency": m.concurrency,
                    "metrics": m.metrics,
                    "startup_s": t.startup_s,
                    "kv_cache_tokens": t.kv_cache_tokens,
                    "peak_rss_mb": t.peak_rss_mb,
                    "lossless_match_rate": t.lossless_match_rate,
                }
            )
    host = {
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
    }
    header = {
        "format": FORMAT,
        "space": space,
        "recorded": {
            "job_id": job_id,
            "job_state": job.state,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": host,
            "engine_launches": job.engine_launches,
            "engine_startup_s": job.engine_startup_s,
        },
    }
    return header, rows


def write_surface(
    store: Store, job_id: int, path: Path, *, engine_version: str | None = None
) -> int:
    """Write a job's real measurements as a surface file; returns the number of points."""
    header, rows = _rows_of_job(store, job_id)
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


def _lines(path: Path, name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise SurfaceError(f"cannot read surface {name}: {why}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise SurfaceError(f"{name}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise SurfaceError(f"{name}:{n}: each line must be a JSON object")
        yield n, obj


def surface_is_simulated(path: str | Path) -> bool:
    """Whether a surface file's header says a simulator wrote it (reads one line only);
    False for a file that cannot be read (the replay then fails with the reason)."""
    try:
        with open(path, encoding="utf-8") as f:
            return bool(json.loads(f.readline()).get("simulated"))
    except (OSError, ValueError, AttributeError):
        return False


def read_surface(path: str | Path, name: str | None = None) -> Surface:
    """Load and check a surface; errors name the line and the field, and the file as
    ``name`` (default: ``path``). They never quote a value from the file: the service reads
    files a submitter names, and an answer must not show what any other file holds."""
    p = Path(path)
    shown = str(p) if name is None else name
    it = _lines(p, shown)
    first = next(it, None)
    if first is None:
        raise SurfaceError(f"{shown}: empty file")
    _, header = first
    if header.get("format") != FORMAT:
        raise SurfaceError(f"{shown}:1: format: expected {FORMAT!r} (not a SpecTune surface)")
    if not isinstance(header.get("space"), dict):
        raise SurfaceError(f"{shown}:1: space: missing (the search space the grid was taken from)")
    points: dict[str, SurfacePoint] = {}
    for n, row in it:
        cfg = row.get("config")
        if not isinstance(cfg, dict) or "method" not in cfg:
            raise SurfaceError(f"{shown}:{n}: config: missing or without a method")
        state = row.get("state")
        key = config_key(cfg)
        if state == TrialState.FAIL:
            if key in points:
                raise SurfaceError(
                    f"{shown}:{n}: config: failed row for a configuration already seen"
                )
            points[key] = SurfacePoint(
                cfg,
                TrialState.FAIL,
                fail_reason=str(row.get("fail_reason")),
                fail_detail=row.get("fail_detail"),
            )
            continue
        if state != TrialState.COMPLETE:
            raise SurfaceError(f"{shown}:{n}: state: expected 'complete' or 'fail'")
        for key_name in ("workload", "concurrency", "metrics"):
            if key_name not in row:
                raise SurfaceError(f"{shown}:{n}: {key_name}: missing")
        metrics = row["metrics"]
        if not isinstance(metrics, dict) or "output_tok_per_s" not in metrics:
            raise SurfaceError(f"{shown}:{n}: metrics: must hold at least output_tok_per_s")
        old = points.get(key)
        if old is not None and old.state == TrialState.FAIL:
            raise SurfaceError(
                f"{shown}:{n}: config: measured row for a configuration that failed"
            )
        if old is None:
            old = SurfacePoint(
                cfg,
                TrialState.COMPLETE,
                {},
                startup_s=row.get("startup_s"),
                kv_cache_tokens=row.get("kv_cache_tokens"),
                peak_rss_mb=row.get("peak_rss_mb"),
                lossless_match_rate=row.get("lossless_match_rate"),
            )
            points[key] = old
        level = (str(row["workload"]), int(row["concurrency"]))
        if level in old.measurements:
            raise SurfaceError(
                f"{shown}:{n}: concurrency: {level[0]} at {level[1]} recorded twice for one config"
            )
        old.measurements[level] = metrics
    if not points:
        raise SurfaceError(f"{shown}: no measured points after the header")
    return Surface(p, header, points, shown)
