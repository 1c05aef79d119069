"""Where a trial's numbers come from, chosen once per job: a launched engine
(``LaunchMeasurer``, the product) or a recorded surface (``tuner.surface.ReplayMeasurer``,
for benchmarking the search). No shared loop branches on which one it is."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner.engines import EngineConfig, EngineLaunchError, server_class
from tuner.loadgen import LoadError
from tuner.measure._control import JobCancelled, JobControl, Pruned, TrialFailed
from tuner.measure._distribution import Samples
from tuner.measure._hub import HubModels
from tuner.measure._measured import Measured
from tuner.measure._protocol import (
    greedy_outputs,
    measure_all,
    sampled_outputs,
    token_sequences,
)
from tuner.preflight import PreflightError, preflight
from tuner.space import SearchSpace
from tuner.workloads import Prompt

__all__ = ["LaunchMeasurer", "Measurer", "PruneCheck", "LosslessCheck", "OnLaunch"]

PruneCheck = Callable[[dict[str, Any]], str | None]  # objective point -> evidence or None
# (greedy ids, sampled continuations or None) -> (match rate with the baseline's greedy ids,
# p-value of the sampled ones against the baseline's); None where there is nothing to compare
# (no baseline yet, no speculation, no sampled workload)
LosslessCheck = Callable[
    [list[list[int] | None], Samples | None], tuple[float | None, float | None]
]
OnLaunch = Callable[[float, bool], None]  # (start-up seconds, confirmation?) -> None


class Measurer(ABC):
    """Measures one engine configuration at every point of the space."""

    live = True  # False for a replay: nothing to re-launch, confirm or compare with a host

    def prepare(self) -> None:
        """Ready what every launch needs, once, before the first (a job's hub models
        fetched); a recorded surface needs nothing."""
        return None

    def check(self, cfg: EngineConfig) -> list[str]:
        """Refuse a configuration before any launch (raises TrialFailed); returns what
        could not be checked and why (notes stored with the trial). A recorded surface has
        nothing to check."""
        return []

    @abstractmethod
    def measure(
        self,
        cfg: EngineConfig,
        params: dict[str, Any],
        log_path: Path,
        *,
        prune: PruneCheck | None = None,
        lossless: LosslessCheck | None = None,
        confirm: bool = False,
    ) -> Measured:
        """The points, objective point first, and what the launch reported. ``prune`` may
        stop it after the objective point (raises ``Pruned``); ``lossless`` prices the greedy
        outputs, and the sampled ones when a workload samples, against the baseline's."""


class LaunchMeasurer(Measurer):
    """One real engine launch per call, measuring every workload and level.

    ``launcher`` is for tests only: it replaces the engine's ``python -m …`` prefix (the
    FAKE OpenAI server, tests/fake_openai_server.py, through ``tests.helpers.fake_measurers``).
    This constructor argument is the one way in: no setting or environment variable reaches
    it, so the product cannot report fake numbers by accident."""

    def __init__(
        self,
        space: SearchSpace,
        prompts: dict[str, list[Prompt]],
        work_dir: Path,
        control: JobControl,
        on_launch: OnLaunch,
        launcher: list[str] | None = None,
        devices: str | None = None,
    ) -> None:
        self.space, self.prompts, self.work_dir = space, prompts, work_dir
        self.control, self.on_launch, self.launcher = control, on_launch, launcher
        self.devices = devices  # this worker's accelerators (None: the engine's default)
        self.server_cls = server_class(space.engine.kind)
        self.hub = HubModels(space)

    def prepare(self) -> None:
        self.hub.prepare()

    def check(self, cfg: EngineConfig) -> list[str]:
        if (why := self.hub.problem(cfg)) is not None:
            raise TrialFailed("invalid_config", f"pre-flight: {why}")
        notes: list[str] = []
        try:
            preflight(cfg, notes=notes)
        except PreflightError as e:
            raise TrialFailed("invalid_config", f"pre-flight: {e}") from None
        why = self.server_cls.speculative_problem(cfg.speculative_config, cfg.device)
        if why is not None:
            raise TrialFailed("invalid_config", f"pre-flight: {why}")
        # The real engine only: a test's stand-in server (launcher) has no build to test.
        if self.launcher is None and self.space.sampled_workload is not None:
            if (note := self.server_cls.build_note(cfg)) is not None:
                notes.append(f"engine build: {note}")
        return notes

    def measure(
        self,
        cfg: EngineConfig,
        params: dict[str, Any],
        log_path: Path,
        *,
        prune: PruneCheck | None = None,
        lossless: LosslessCheck | None = None,
        confirm: bool = False,
    ) -> Measured:
        self.hub.prepare()  # a no-op after the job's first; never inside a start-up
        server = self.server_cls(
            cfg,
            log_path,
            cache_root=self.work_dir / "cache" / self.server_cls.kind,
            startup_timeout_s=self.space.engine.startup_timeout_s,
            launcher=self.launcher,
            devices=self.devices,
            run_dir=self.work_dir / "run",
        )
        self.control.attach(server)
        kv_cache_tokens: int | None = None
        ids: list[list[int] | None] | None = None
        samples: Samples | None = None
        rate = p_value = None
        seqs: list[list[list[int]]] | None = None
        try:
            with server:
                self.on_launch(server.startup_s or 0.0, confirm)
                kv_cache_tokens = server.kv_cache_tokens()
                try:
                    ms = measure_all(server, self.space, self.prompts, prune)
                    if (
                        cfg.speculative_config is None
                        and self.space.search == "guided"
                        and self.space.offline_pricing
                    ):
                        seqs = token_sequences(server, self.space, self.prompts, cfg.max_num_seqs)
                    if lossless is not None:
                        ids = greedy_outputs(server, self.space, self.prompts)
                        samples = sampled_outputs(
                            server,
                            self.space,
                            self.prompts,
                            baseline=cfg.speculative_config is None,
                        )
                        rate, p_value = lossless(ids, samples)
                except (LoadError, OSError) as e:
                    detail = f"{e}\n--- engine log tail ---\n{server.log_tail()}"
                    reason = "crash" if not server.alive() else "measurement"
                    raise TrialFailed(reason, detail) from None
                if not server.alive():
                    raise TrialFailed(
                        "crash", "engine died during measurement\n" + server.log_tail()
                    )
        except Pruned as e:
            e.measured = replace(
                e.measured,
                startup_s=server.startup_s,
                log_path=str(log_path),
                kv_cache_tokens=kv_cache_tokens,
            )
            raise
        except (EngineLaunchError, TrialFailed) as e:
            if self.control.cancelled:
                raise JobCancelled("job cancelled while its engine ran") from None
            if isinstance(e, TrialFailed):
                e.log_path = str(log_path)
                raise
            self.on_launch(0.0, confirm)
            detail = f"{e.message}\n--- engine log tail ---\n{e.log_tail}"
            raise TrialFailed(e.reason, detail, str(log_path)) from None
        finally:
            self.control.attach(None)
        if self.control.cancelled:
            raise JobCancelled("job cancelled while its engine ran")
        return Measured(
            ms,
            startup_s=server.startup_s,
            log_path=str(log_path),
            kv_cache_tokens=kv_cache_tokens,
            peak_rss_mb=server.peak_rss_mb,
            greedy_token_ids=ids,
            lossless_match_rate=rate,
            sampled_token_ids=samples,
            lossless_p_value=p_value,
            token_sequences=seqs,
        )
