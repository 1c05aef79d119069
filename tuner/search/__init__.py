"""The search above Optuna's sampler: start points, the structure-aware guide, classes of
equivalent configurations, depth predictions and pruning."""

from tuner.search._classes import canonical, kv_need_tokens, memory_family
from tuner.search._depth import DepthPoint, Prediction, predict_depth, tau
from tuner.search._guide import Proposal, family_key, propose
from tuner.search._strategy import GUIDE_ATTR, SearchStrategy, dominated_by, interval_text

__all__ = [
    "GUIDE_ATTR",
    "DepthPoint",
    "Prediction",
    "Proposal",
    "SearchStrategy",
    "canonical",
    "dominated_by",
    "family_key",
    "interval_text",
    "kv_need_tokens",
    "memory_family",
    "predict_depth",
    "propose",
    "tau",
]
