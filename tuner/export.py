"""Export the winning configuration in the forms engines take."""

from __future__ import annotations

import json
from typing import Literal

from tuner.engines import EngineConfig, export_cli
from tuner.pareto import Point, job_report

__all__ = ["FORMATS", "ExportError", "export_point", "export_job"]

FORMATS = ("vllm-json", "vllm-cli")
Format = Literal["vllm-json", "vllm-cli"]


class ExportError(LookupError):
    pass


def export_point(p: Point, fmt: str) -> str:
    cfg = EngineConfig.from_dict(p.engine_config)
    if fmt == "vllm-json":
        # Only the object that goes after --speculative-config; null when the baseline wins.
        return json.dumps(cfg.speculative_config, separators=(", ", ": "))
    if fmt == "vllm-cli":
        return export_cli(cfg)
    raise ExportError(f"format: unknown {fmt!r}; choose from {', '.join(FORMATS)}")


def export_job(url: str, job_id: int, fmt: str, **report_kw) -> str:
    if fmt not in FORMATS:
        raise ExportError(f"format: unknown {fmt!r}; choose from {', '.join(FORMATS)}")
    rep = job_report(url, job_id, **report_kw)
    if rep.winner is None:
        raise ExportError(
            f"job {job_id} has no feasible configuration at concurrency {rep.concurrency} "
            f"on workload {rep.workload} under SLO {rep.slo or 'none'}"
        )
    return export_point(rep.winner, fmt)
