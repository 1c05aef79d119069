"""Measuring a configuration: the protocol (repeats, noise, lossless check, constraints),
where the numbers come from (a launched engine or a recorded surface), hosted references."""

from tuner.measure._control import JobCancelled, JobControl, Pruned, TrialFailed
from tuner.measure._distribution import Samples, distribution_p_value
from tuner.measure._measured import Measured
from tuner.measure._measurer import LaunchMeasurer, LosslessCheck, Measurer, OnLaunch, PruneCheck
from tuner.measure._protocol import (
    MAX_FAILED_FRACTION,
    constraint_values,
    load_all_prompts,
    lossless_match,
    measure_all,
    measure_point,
    objective_values,
    point_order,
)
from tuner.measure._references import measure_references

__all__ = [
    "MAX_FAILED_FRACTION",
    "JobCancelled",
    "JobControl",
    "LaunchMeasurer",
    "LosslessCheck",
    "Measured",
    "Measurer",
    "OnLaunch",
    "PruneCheck",
    "Pruned",
    "Samples",
    "TrialFailed",
    "constraint_values",
    "distribution_p_value",
    "load_all_prompts",
    "lossless_match",
    "measure_all",
    "measure_point",
    "measure_references",
    "objective_values",
    "point_order",
]
