"""The search above Optuna's sampler: start points, the structure-aware guide, classes of
equivalent configurations, depth predictions and pruning."""

from tuner.search._classes import canonical, kv_need_tokens, memory_family
from tuner.search._depth import (
    PREDICTED_METRICS,
    DepthPoint,
    Prediction,
    predict_depth,
    predict_from_baseline,
    tau,
)
from tuner.search._guide import Proposal, family_key, propose
from tuner.search._offline import StepCost, step_costs
from tuner.search._predicted import PredictedPoint
from tuner.search._pruner import DominancePruner, ObjectivePoint, dominated_by, interval_text
from tuner.search._start import StartPoints
from tuner.search._stop import Candidate, Outlook, outlook, winner_bound
from tuner.search._strategy import GUIDE_ATTR, SearchStrategy

__all__ = [
    "GUIDE_ATTR",
    "PREDICTED_METRICS",
    "DepthPoint",
    "DominancePruner",
    "ObjectivePoint",
    "PredictedPoint",
    "Prediction",
    "Proposal",
    "SearchStrategy",
    "Candidate",
    "Outlook",
    "outlook",
    "winner_bound",
    "StartPoints",
    "StepCost",
    "canonical",
    "dominated_by",
    "family_key",
    "interval_text",
    "kv_need_tokens",
    "memory_family",
    "predict_depth",
    "predict_from_baseline",
    "propose",
    "step_costs",
    "tau",
]
