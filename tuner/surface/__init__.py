"""Recorded surfaces (``_format.py`` documents the file) and the replay measurer that answers
trials from one, for benchmarking the search only."""

from tuner.candidates import grid_configs, grid_params, params_to_config
from tuner.surface._format import (
    FORMAT,
    Surface,
    SurfaceError,
    SurfacePoint,
    config_key,
    read_surface,
    surface_is_simulated,
    write_surface,
)
from tuner.surface._replay import ReplayEngine, ReplayMeasurer, ReplayMiss

__all__ = [
    "FORMAT",
    "ReplayEngine",
    "ReplayMeasurer",
    "ReplayMiss",
    "Surface",
    "SurfaceError",
    "SurfacePoint",
    "config_key",
    "grid_configs",
    "grid_params",
    "params_to_config",
    "read_surface",
    "surface_is_simulated",
    "write_surface",
]
