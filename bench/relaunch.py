"""Same job, same answer? Launch one configuration N times and compare the spread between
launches with the intervals one launch reports (issue 21).

    .venv/bin/python bench/relaunch.py --space search_spaces/tiny-cpu.yaml \
        --params '{"method": "none"}' [--launches 6] [--db URL] [--work-dir DIR] [--json-only]

Each launch is what a trial is: the product's measurer (``tuner.job.default_measurer``)
starts the engine once, measures every point of the space with the space's workload and
measurement protocol (repeats, noise rejection), and stops it. ``--params`` is completed as
a job completes a start point: a method parameter not given takes its start value (n-gram's
lookup range from its min to its max, else the first choice), ``max_num_seqs`` and
``memory_fraction`` the first of the space's lists.

For the space's first objective (e.g. ``output_tok_per_s``) at every concurrency level of
its primary workload, with N launches and m_i the median of launch i's repeats:

- ``within_cv``: the median over launches of each launch's own spread, its relative MAD
  x 1.4826 (``tuner.stats.relative_mad`` of the point's ``stats``): what the repeats of one
  launch vary by.
- ``between_cv``: stdev / mean of the m_i: what launches vary by.
- ``coverage``: leave one out; the fraction of launches i whose m_i lies inside the
  interval the other N-1 launches give for one more launch
  (``tuner.stats.relaunch_interval``: on the log scale, mean +/- t(0.975, N-2) s
  sqrt(1 + 1/(N-1))). About 0.95 when that interval is honest.
- ``coverage_within``: the fraction of ordered pairs (i, j != i) where m_i lies inside
  launch j's own 95 % interval over its repeats: what a job's report promises today. Far
  below 0.95 when launches differ more than repeats do.

Prints one line per launch on stderr, then a table and, last, one JSON object:
``{"configuration", "launches", "levels": {"1": {"within_cv", "between_cv", "coverage",
"coverage_within", "medians"}, ...}}`` (plus the metric, workload and failed launches).
With ``--db`` the launches are counted on a job named ``<space>-relaunch`` there (default:
a temporary SQLite database).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.candidates import engine_config, other_targets, params_to_config  # noqa: E402
from tuner.context import JobContext, MeasurerFactory  # noqa: E402
from tuner.job import create_job, default_measurer  # noqa: E402
from tuner.measure import JobControl, TrialFailed, load_all_prompts  # noqa: E402
from tuner.methods import METHODS  # noqa: E402
from tuner.space import SearchSpace, SpaceError, load_space  # noqa: E402
from tuner.states import JobState  # noqa: E402
from tuner.stats import relative_mad, relaunch_interval  # noqa: E402
from tuner.storage import Store  # noqa: E402
from tuner.workloads import WorkloadError  # noqa: E402

MIN_LAUNCHES = 3  # leave one out needs two others to have a spread


class ParamsError(ValueError):
    """``--params`` is not JSON, or names something the space does not have."""


def complete_params(raw: str | dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """A trial's full ``params`` from what the user gave; ParamsError naming the field."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ParamsError(f"--params: not JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ParamsError('--params: must be a JSON object such as \'{"method": "none"}\'')
    method = raw.get("method")
    methods = ["none", *space.methods.enabled()]
    if method not in methods:
        raise ParamsError(f"params.method: {method!r} is not in the space; choose from {methods}")
    m = METHODS.get(method)
    spec = getattr(space.methods, method, None)
    own = {p.key: p for p in m.active(spec)} if m else {}
    targets = [space.engine.model, *other_targets(space)]
    allowed = {"method", "max_num_seqs", "memory_fraction", *own}
    if method == "none" and len(targets) > 1:
        allowed.add("target")
    for key in raw:
        if key not in allowed:
            raise ParamsError(
                f"params.{key}: not a parameter of {method}; known: {sorted(allowed)}"
            )
    d: dict[str, Any] = {"method": method}
    for key in ("max_num_seqs", "memory_fraction"):
        d[key] = raw.get(key, getattr(space, key)[0])
        if d[key] not in getattr(space, key):
            raise ParamsError(f"params.{key}: {d[key]!r} is not one of {getattr(space, key)}")
    if "target" in allowed:
        d["none.target"] = raw.get("target", space.engine.model)
        if d["none.target"] not in targets:
            raise ParamsError(f"params.target: {d['none.target']!r} is not one of {targets}")
    for key, p in own.items():
        if key in raw:
            v = raw[key]
        else:  # a start point's default: the range's end it names, else the first choice
            v = p.choices(spec)[0] if p.start == "first" else p.default(spec)
        if v not in p.choices(spec):
            raise ParamsError(f"params.{key}: {v!r} is not one of {p.choices(spec)}")
        d[m.optuna_name(p)] = v  # type: ignore[union-attr]
    return params_to_config(d, space)  # the job's own completion (served target, fixes)


def _cv(values: list[float]) -> float | None:
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if len(values) > 1 and mean else None


def summarise(launches: list[list[dict[str, Any]]], metric: str, workload: str) -> dict:
    """Per concurrency level, from each launch's measured points: within_cv, between_cv,
    coverage, coverage_within and the launch medians (definitions: module docstring)."""
    by_level: dict[int, list[dict[str, Any]]] = {}
    for points in launches:
        for pt in points:
            if pt["workload"] == workload and metric in (pt.get("stats") or {}):
                by_level.setdefault(int(pt["concurrency"]), []).append(pt)
    out: dict[str, dict[str, Any]] = {}
    for level in sorted(by_level):
        pts = by_level[level]
        meds = [float(p[metric]) for p in pts]
        stats = [p["stats"][metric] for p in pts]
        n = len(meds)
        inside = 0
        for i in range(n):
            lo, hi = relaunch_interval(meds[:i] + meds[i + 1 :]) if n > 2 else (None, None)
            inside += lo is not None and lo <= meds[i] <= hi
        pairs = [
            stats[j]["ci95_low"] <= meds[i] <= stats[j]["ci95_high"]
            for i in range(n)
            for j in range(n)
            if i != j
        ]
        out[str(level)] = {
            "within_cv": statistics.median(relative_mad(st) for st in stats),
            "between_cv": _cv(meds),
            "coverage": inside / n if n > 2 else None,
            "coverage_within": sum(pairs) / len(pairs) if pairs else None,
            "medians": meds,
        }
    return out


def relaunch(
    space: SearchSpace,
    params: dict[str, Any],
    *,
    launches: int,
    store: Store,
    work_dir: Path,
    measurers: MeasurerFactory | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    keep_points: bool = False,
) -> dict[str, Any]:
    """Launch ``params`` (full, ``complete_params``) ``launches`` times and summarise. The
    seam tests use: ``measurers`` (None: the product's ``default_measurer``) makes the
    measurer, as ``run_job(..., measurers=...)`` does. ``keep_points`` adds every launch's
    measured points under ``points`` (bench/protocol_spread.py pools them)."""
    store.ensure_schema()
    job_id = create_job(store, space.model_copy(update={"name": f"{space.name}-relaunch"}))
    store.start_job(job_id)
    ctx = JobContext(store, job_id, space, launches, work_dir.resolve(), JobControl())
    measurer = (measurers or default_measurer)(ctx, load_all_prompts(space))
    if not measurer.live:
        raise ParamsError("space: it replays a recorded surface; there is nothing to launch")
    metric = space.objectives[0].metric
    measured: list[list[dict[str, Any]]] = []
    failed = 0
    try:
        cfg = engine_config(params, space)
        measurer.check(cfg)  # pre-flight: refuse before any launch
        for i in range(launches):
            try:
                got = measurer.measure(cfg, params, ctx.log_dir / f"relaunch-{i}.log")
            except TrialFailed as e:
                failed += 1
                say(f"launch {i + 1}/{launches}: failed ({e})")
                continue
            measured.append(got.points)
            cells = ", ".join(
                f"c={p['concurrency']} {p.get(metric) or float('nan'):.4g}"
                for p in sorted(got.points, key=lambda p: p["concurrency"])
                if p["workload"] == space.primary_workload
            )
            up = got.startup_s or 0.0
            say(f"launch {i + 1}/{launches}: {metric} {cells} (startup {up:.0f} s)")
    finally:
        store.end_job(job_id, JobState.SUCCEEDED if measured else JobState.FAILED, None)
    out = {
        "configuration": params,
        "launches": len(measured),
        "failed_launches": failed,
        "metric": metric,
        "workload": space.primary_workload,
        "levels": summarise(measured, metric, space.primary_workload),
    }
    if keep_points:
        out["points"] = measured
    return out


def table(result: dict[str, Any]) -> str:
    """The human table: one row per concurrency level."""

    def f(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    head = f"{'concurrency':>11}  {'within CV':>9}  {'between CV':>10}  {'coverage':>8}  "
    head += f"{'coverage(within)':>16}  launch medians ({result['metric']})"
    rows = [
        f"{level:>11}  {f(r['within_cv'], '.1%'):>9}  {f(r['between_cv'], '.1%'):>10}  "
        f"{f(r['coverage'], '.0%'):>8}  {f(r['coverage_within'], '.0%'):>16}  "
        + " ".join(format(m, ".4g") for m in r["medians"])
        for level, r in result["levels"].items()
    ]
    return "\n".join(
        [f"{result['launches']} launches of {json.dumps(result['configuration'])}", head, *rows]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--space", required=True, type=Path, help="the search space YAML")
    ap.add_argument("--params", required=True, help="the configuration, a JSON object")
    ap.add_argument("--launches", type=int, default=6)
    ap.add_argument("--db", help="database URL (default: a temporary SQLite file)")
    ap.add_argument("--work-dir", type=Path, help="engine logs and caches (default: temporary)")
    ap.add_argument("--json-only", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    if args.launches < MIN_LAUNCHES:
        print(
            f"--launches: at least {MIN_LAUNCHES} (leave one out needs two others)",
            file=sys.stderr,
        )
        return 2
    try:
        space = load_space(args.space)
        params = complete_params(args.params, space)
    except (SpaceError, ParamsError) as e:
        print(e, file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="spectune-relaunch-"))
    store = Store(args.db or f"sqlite:///{tmp / 'relaunch.db'}")
    work_dir = args.work_dir or tmp / "work"
    print(f"engine logs under {work_dir.resolve() / 'logs'}", file=sys.stderr, flush=True)
    try:
        result = relaunch(space, params, launches=args.launches, store=store, work_dir=work_dir)
    except (ParamsError, TrialFailed, WorkloadError) as e:
        print(e, file=sys.stderr)
        return 2
    if not args.json_only:
        print(table(result))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
