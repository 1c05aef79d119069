"""One APIRouter per resource."""

from tuner.api.routes import (
    exports,
    health,
    jobs,
    metrics,
    pareto,
    predictions,
    search_spaces,
    trials,
    watches,
)

__all__ = [
    "exports",
    "health",
    "jobs",
    "metrics",
    "pareto",
    "predictions",
    "search_spaces",
    "trials",
    "watches",
]
