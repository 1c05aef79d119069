"""A prediction as its readers take it: typed, with the point it was made for as a workload
and a concurrency (not a ``"workload@concurrency"`` string to split again).

Why its own type: the depth model's ``Prediction`` knows a depth, not the configuration it
prices nor where; the strategy's readers (the API's predictions, the note stored beside a
launch) need both, and a prediction must never pass for a measurement on the way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.search._depth import Prediction

__all__ = ["PredictedPoint"]


@dataclass(frozen=True)
class PredictedPoint:
    """The depth model's prediction for one unlaunched configuration at one point (workload,
    concurrency): for people to see, and stored beside the launch it priced; never a
    measurement."""

    params: dict[str, Any]
    workload: str
    concurrency: int
    metrics: dict[str, Any]
    rel_sigma: float  # relative half-width of the ~95 % band of the first objective
    basis: tuple[int, ...]  # the measured trials it was computed from
    notes: tuple[str, ...]  # how it was computed, in sentences

    @classmethod
    def of(
        cls, params: dict[str, Any], pred: Prediction, point: tuple[str, int]
    ) -> PredictedPoint:
        return cls(
            params, point[0], point[1], pred.metrics, pred.rel_sigma, pred.basis, pred.notes
        )

    def note(self, objective: str) -> dict[str, Any]:
        """As stored beside the trial it launched (JSON: ``search["predicted"]``; older rows
        hold ``level`` instead of ``workload`` and ``concurrency``, read by
        ``tuner.storage.prediction_point``)."""
        return {
            "objective": objective,
            "value": self.metrics[objective],
            "rel_sigma": self.rel_sigma,
            "workload": self.workload,
            "concurrency": self.concurrency,
            "metrics": self.metrics,
            "basis": list(self.basis),
            "notes": list(self.notes),
        }
