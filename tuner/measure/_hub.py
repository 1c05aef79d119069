"""A job's hub models fetched before its first engine launch.

Why before: an engine that downloads its checkpoint at start-up would count minutes of
network in its start-up time, and a trial's wall time; the engine runs with HF_HUB_OFFLINE=1
and loads the id from the cache instead. What is fetched: every hub model some configuration
of the space may launch, i.e. whose small files (config.json, tokenizer) pre-flight reads
without refusing every configuration it is in, so a draft of another vocabulary is never
downloaded; one the cache already holds with its weights is used as it is. Offline
(HF_HUB_OFFLINE set) nothing is fetched: what is cached launches, what is not fails at its
launch. A model that does not download fails each candidate it is in with
``invalid_config``, the message naming its field.
"""

from __future__ import annotations

import logging
import time

from tuner.candidates import engine_config, grid_params, params_to_config, space_models
from tuner.engines import EngineConfig
from tuner.hub import (
    HubError,
    downloads_allowed,
    fetch_config_files,
    fetch_model,
    is_hub_id,
    local_view,
)
from tuner.preflight import PreflightError, preflight
from tuner.space import SearchSpace

__all__ = ["HubModels", "config_models"]

log = logging.getLogger("spectune.hub")


def config_models(cfg: EngineConfig) -> list[str]:
    """The checkpoints one engine configuration loads: its target and its proposer."""
    spec = cfg.speculative_config or {}
    return [cfg.model] + ([str(spec["model"])] if spec.get("model") else [])


class HubModels:
    """The hub models of one job on this worker: fetched once (``prepare``), and why a
    configuration cannot launch when one of its models did not download (``problem``)."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.failed: dict[str, str] | None = None  # hub id -> "field: why"; None: not yet

    def prepare(self) -> None:
        """Fetch what the job may launch into the cache (once; a no-op offline or without
        hub models)."""
        if self.failed is not None:
            return
        self.failed = {}
        models = [(f, m) for f, m in space_models(self.space) if is_hub_id(m)]
        if not models or not downloads_allowed():
            return
        for field, model in models:
            if local_view(model) is None:
                try:
                    fetch_config_files(model)
                except HubError as e:
                    self.failed[model] = f"{field}: {e}"
        launchable = self._launchable()
        for field, model in models:
            if model not in launchable or model in self.failed:
                continue
            if local_view(model, weights=True) is not None:
                # Already in the cache: used as it is, as the engine would offline (no new
                # revision mid-study, no network on a machine without one).
                log.info("%s: %s is in the Hugging Face cache", field, model)
                continue
            t0 = time.monotonic()
            log.info("%s: fetching %s into the Hugging Face cache", field, model)
            try:
                fetch_model(model)
            except HubError as e:
                self.failed[model] = f"{field}: {e}"
                log.warning("%s: %s", field, e)
                continue
            log.info("%s: %s ready (%.0f s)", field, model, time.monotonic() - t0)

    def _launchable(self) -> set[str]:
        """Hub models in some configuration pre-flight (on the small files) lets through."""
        seen: set[tuple[str, ...]] = set()
        out: set[str] = set()
        for p in grid_params(self.space):
            cfg = engine_config(params_to_config(p, self.space), self.space)
            key = (*config_models(cfg), cfg.method)
            if key in seen:
                continue
            seen.add(key)
            if any(m in (self.failed or {}) for m in key):
                continue
            try:
                preflight(cfg, memory_bytes=None)
            except PreflightError:
                continue
            out.update(m for m in config_models(cfg) if is_hub_id(m))
        return out

    def problem(self, cfg: EngineConfig) -> str | None:
        """Why ``cfg`` cannot launch: one of its models did not download (None: it can)."""
        self.prepare()
        for model in config_models(cfg):
            if (why := (self.failed or {}).get(model)) is not None:
                return why
        return None
