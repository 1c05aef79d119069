"""Does a measurement protocol narrow the spread between launches? Launch configurations
under two or more protocols, interleaved, and compare (issue 21, item 5).

    .venv/bin/python bench/protocol_spread.py --space search_spaces/tiny-cpu.yaml \
        --params '[{"method": "none"}, {"method": "ngram", "num_speculative_tokens": 4}]' \
        --protocols '{"fixed": {"warmup": "fixed", "repeat_s": null},
                      "steady": {"warmup": "steady", "repeat_s": 5}}' \
        --launches 6 [--extra steady=4] [--json-only]

A protocol is a set of ``measurement`` fields of the space (warm-up kind, repeat sizing...)
replacing the space's own. Launches go round-robin (launch 1 of every configuration under
every protocol, then launch 2...), so a slow drift of the machine hits every protocol alike:
on a shared machine, comparing two runs made an hour apart compares the hours. ``--extra
NAME=N`` adds N launches of protocol NAME at the end (to resolve its coverage more finely).

Each launch is what a trial is (``bench/relaunch.py``'s ``relaunch`` with one launch).
Per protocol and configuration the numbers are ``bench/relaunch.py``'s: within_cv,
between_cv, coverage (leave one out, ``tuner.stats.relaunch_interval``), coverage_within,
the launch medians; plus the mean launch wall time. Last line: one JSON object
``{"protocols": {name: {"overrides", "configurations": [{"configuration", "launches",
"levels", "mean_launch_s"}]}}}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.relaunch import ParamsError, complete_params, relaunch, summarise, table  # noqa: E402
from tuner.context import MeasurerFactory  # noqa: E402
from tuner.measure import TrialFailed  # noqa: E402
from tuner.space import SearchSpace, SpaceError, load_space  # noqa: E402
from tuner.storage import Store  # noqa: E402
from tuner.workloads import WorkloadError  # noqa: E402


def with_protocol(space: SearchSpace, overrides: dict[str, Any]) -> SearchSpace:
    """The space with ``measurement`` fields replaced; ParamsError naming a bad field."""
    data = space.measurement.model_dump()
    unknown = sorted(set(overrides) - set(data))
    if unknown:
        raise ParamsError(f"--protocols: unknown measurement field(s) {unknown}")
    try:
        m = type(space.measurement).model_validate({**data, **overrides})
    except ValueError as e:
        raise ParamsError(f"--protocols: {e}") from None
    return space.model_copy(update={"measurement": m})


def _json(raw: str, flag: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise ParamsError(f"{flag}: not JSON ({e})") from None


def compare(
    space: SearchSpace,
    configs: list[dict[str, Any]],
    protocols: dict[str, dict[str, Any]],
    *,
    launches: int,
    extra: dict[str, int],
    store: Store,
    work_dir: Path,
    measurers: MeasurerFactory | None = None,
) -> dict[str, Any]:
    """Launch every configuration under every protocol, round-robin, and summarise each
    (protocol, configuration); ``measurers`` is the seam tests use (None: the product's)."""
    spaces = {name: with_protocol(space, o) for name, o in protocols.items()}
    points: dict[tuple[str, int], list[list[dict[str, Any]]]] = {}
    walls: dict[tuple[str, int], list[float]] = {}
    schedule = [
        (name, i) for _ in range(launches) for name in protocols for i in range(len(configs))
    ]
    schedule += [
        (name, i) for name, n in extra.items() for _ in range(n) for i in range(len(configs))
    ]
    metric = space.objectives[0].metric
    for step, (name, i) in enumerate(schedule):
        t0 = time.monotonic()
        got = relaunch(
            spaces[name],
            configs[i],
            launches=1,
            store=store,
            work_dir=work_dir,
            say=lambda line: None,
            keep_points=True,
            measurers=measurers,
        )
        walls.setdefault((name, i), []).append(time.monotonic() - t0)
        points.setdefault((name, i), []).extend(got["points"])
        cells = (
            ", ".join(
                f"c={p['concurrency']} {p.get(metric) or float('nan'):.4g}"
                for launch in got["points"]
                for p in sorted(launch, key=lambda p: p["concurrency"])
                if p["workload"] == space.primary_workload
            )
            or "failed"
        )
        print(
            f"[{step + 1}/{len(schedule)}] {name} {json.dumps(configs[i])}: {cells}",
            file=sys.stderr,
            flush=True,
        )
    out: dict[str, Any] = {}
    for name, overrides in protocols.items():
        rows = []
        for i, cfg in enumerate(configs):
            pts = points.get((name, i), [])
            rows.append(
                {
                    "configuration": cfg,
                    "launches": len(pts),
                    "metric": metric,
                    "levels": summarise(pts, metric, space.primary_workload),
                    "mean_launch_s": sum(walls[(name, i)]) / len(walls[(name, i)]),
                }
            )
        out[name] = {"overrides": overrides, "configurations": rows}
    return {"protocols": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--space", required=True, type=Path)
    ap.add_argument("--params", required=True, help="a JSON list of configurations")
    ap.add_argument("--protocols", required=True, help="JSON: name -> measurement fields")
    ap.add_argument("--launches", type=int, default=6)
    ap.add_argument("--extra", action="append", default=[], help="NAME=N more launches")
    ap.add_argument("--db", help="database URL (default: a temporary SQLite file)")
    ap.add_argument("--work-dir", type=Path)
    ap.add_argument("--json-only", action="store_true")
    args = ap.parse_args(argv)
    try:
        space = load_space(args.space)
        raw = _json(args.params, "--params")
        if not isinstance(raw, list) or not raw:
            raise ParamsError("--params: a non-empty JSON list of configurations")
        configs = [complete_params(c, space) for c in raw]
        protocols = _json(args.protocols, "--protocols")
        if not isinstance(protocols, dict) or not protocols:
            raise ParamsError("--protocols: a JSON object of name -> measurement fields")
        extra = {}
        for item in args.extra:
            name, _, n = item.partition("=")
            if name not in protocols or not n.isdigit():
                raise ParamsError(f"--extra: {item!r} is not NAME=N with NAME in --protocols")
            extra[name] = int(n)
        if args.launches < 3:
            raise ParamsError("--launches: at least 3 (leave one out needs two others)")
    except (SpaceError, ParamsError) as e:
        print(e, file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="spectune-protocols-"))
    store = Store(args.db or f"sqlite:///{tmp / 'protocols.db'}")
    try:
        result = compare(
            space,
            configs,
            protocols,
            launches=args.launches,
            extra=extra,
            store=store,
            work_dir=args.work_dir or tmp / "work",
        )
    except (ParamsError, TrialFailed, WorkloadError) as e:
        print(e, file=sys.stderr)
        return 2
    if not args.json_only:
        for name, r in result["protocols"].items():
            print(f"== protocol {name}: {json.dumps(r['overrides'])}")
            for row in r["configurations"]:
                print(table(row) + f"\nmean launch {row['mean_launch_s']:.0f} s")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
