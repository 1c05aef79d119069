"""A job's report as one document, for every front end: the API answers it, the CLI prints it.

Core: it imports nothing of ``tuner.api`` or the web framework; a query naming what the job
did not measure raises ``tuner.errors.InvalidInput``.
"""

from tuner.report._build import ReportQuery, Slice, pareto, report, resolve_query
from tuner.report._models import (
    ExportFormat,
    FrozenModel,
    HostedReference,
    LaunchSpreadPublic,
    ParetoPoint,
    ParetoPublic,
    RoundCostTrial,
    RoundCostVerdict,
    WinnerExport,
)

__all__ = [
    "ExportFormat",
    "FrozenModel",
    "HostedReference",
    "LaunchSpreadPublic",
    "ParetoPoint",
    "ParetoPublic",
    "ReportQuery",
    "RoundCostTrial",
    "RoundCostVerdict",
    "Slice",
    "WinnerExport",
    "pareto",
    "report",
    "resolve_query",
]
