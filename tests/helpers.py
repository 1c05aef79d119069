"""Helpers shared by test modules (imported, never collected): paths, the FAKE engine
launcher and presets, service settings for a temporary folder, the trial read model.

The FAKE OpenAI server (tests/fake_openai_server.py) produces numbers that measure nothing
real; it stands in for vLLM only in tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tuner.api import ServiceSettings
from tuner.context import JobContext, MeasurerFactory
from tuner.engines import EngineConfig
from tuner.measure import LaunchMeasurer, Measurer
from tuner.space import SearchSpace, loads_space
from tuner.workloads import Prompt

REPO = Path(__file__).resolve().parents[1]
FAKE_SERVER = REPO / "tests" / "fake_openai_server.py"
FAKE_SGLANG = REPO / "tests" / "fake_sglang_server.py"
TINY = REPO / "models" / "tiny"


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def histogram_text(name: str, total_s: float, count: int) -> str:
    """A Prometheus histogram's sum and count as vLLM's /metrics writes them (``name``
    without the ``vllm:`` prefix or a suffix)."""
    full = f"vllm:{name}"
    return (
        f"# HELP {full} h\n"
        f"# TYPE {full} histogram\n"
        f'{full}_sum{{engine="0"}} {total_s}\n'
        f'{full}_count{{engine="0"}} {count}\n'
    )


def trial_records(url: str, job_id: int) -> list[dict]:
    """The trial read model as ``spectune trials --json`` prints it (metrics at top level)."""
    from tuner.storage import Store

    return [r.flat() for r in Store(url).trial_records(job_id)]


FAKE_LAUNCHER = [sys.executable, str(FAKE_SERVER)]

FAKE_PRESET = """\
# FAKE engine preset for tests: the numbers it produces measure nothing real.
name: fake-engine-test
engine: {model: target, served_model_name: fake, startup_timeout_s: 30}
methods:
  ngram: {num_speculative_tokens: {min: 1, max: 3}}
  draft_model: {num_speculative_tokens: {min: 1, max: 3}, drafts: [draft]}
max_num_seqs: [4]
concurrency: [1, 2]
workload: {num_prompts: 4, max_tokens: 12, warmup_requests: 1}
slo: {p99_tpot_ms: 1000}
measurement: {repeats: 2, max_relative_mad: 10, confirm_top: 0}
trials: 4
# every trial of the budget runs: the FAKE numbers move with the host's load, and a job that
# could close early would end with a trial count that moves with them (CI of 6ab76ab)
stop_early: false
seed: 3
"""
# The same with the end-of-job confirmation: the best front configuration and the baseline
# are launched again and re-measured.
FAKE_PRESET_CONFIRM = FAKE_PRESET.replace("confirm_top: 0", "confirm_top: 1")


def make_preset_dir(root: Path, preset: str = FAKE_PRESET) -> Path:
    """A search_spaces folder with one preset and the model folders its pre-flight reads."""
    d = root / "search_spaces"
    for name in ("target", "draft"):
        (d / name).mkdir(parents=True)
        (d / name / "config.json").write_text(json.dumps({"vocab_size": 100}))
        (d / name / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    (d / "fake-small.yaml").write_text(preset)
    return d


def make_settings(root: Path, **kw) -> ServiceSettings:
    base = {
        "database_url": f"sqlite:///{root / 'spectune.db'}",
        "search_spaces_dir": make_preset_dir(root)
        if not (root / "search_spaces").exists()
        else root / "search_spaces",
        "work_dir": root / "work",
        "worker_poll_s": 0.2,
        "worker_heartbeat_s": 0.5,
        "worker_stale_after_s": 5.0,
    }
    return ServiceSettings(**{**base, **kw})


EVERY_METHOD_SPACE = f"""
name: every-method
engine: {{kind: {{kind}}, model: {TINY}/target, served_model_name: fake, device: {{device}},
          startup_timeout_s: 30}}
methods:
  ngram: {{num_speculative_tokens: {{min: 1, max: 2}}, prompt_lookup_min: {{min: 1, max: 1}},
          prompt_lookup_max: {{min: 3, max: 3}}}}
  draft_model: {{num_speculative_tokens: {{min: 1, max: 2}}, drafts: [{TINY}/draft]}}
  eagle: {{num_speculative_tokens: {{min: 1, max: 3}}, heads: [{TINY}/eagle]}}
  eagle3: {{num_speculative_tokens: {{min: 1, max: 3}}, heads: [{TINY}/eagle3]}}
  mtp: {{num_speculative_tokens: {{min: 1, max: 1}}, model: {TINY}/target-mtp}}
max_num_seqs: [4]
memory_fraction: [0.15]
concurrency: [1, 2]
workload: {{num_prompts: 4, max_tokens: 12, warmup_requests: 1}}
measurement: {{repeats: 2, confirm_top: 0, prune: false, max_relative_mad: 10}}
slo: {{p99_tpot_ms: 1000}}
start_with:
  - {{method: eagle, num_speculative_tokens: 3}}
  - {{method: eagle3, num_speculative_tokens: 3}}
  - {{method: mtp, num_speculative_tokens: 1}}
trials: {{trials}}
seed: 1
"""


def every_method_space(kind: str = "vllm", device: str = "cpu", trials: int = 5) -> SearchSpace:
    """Every method on the committed tiny checkpoints (tests/job/test_methods.py)."""
    text = EVERY_METHOD_SPACE.replace("{kind}", kind).replace("{device}", device)
    text = text.replace("{trials}", str(trials))
    return loads_space(text, base_dir=REPO)


def fake_measurers(launcher: list[str] | None = None) -> MeasurerFactory:
    """A job's measurer that launches ``launcher`` (the FAKE OpenAI server unless told) in
    place of the engine: what tests give ``run_job``/``Worker``/``create_app`` as
    ``measurers``. Only a test can: the product has no setting or variable that reaches it."""
    cmd = FAKE_LAUNCHER if launcher is None else launcher

    def make(ctx: JobContext, prompts: dict[str, list[Prompt]]) -> Measurer:
        return LaunchMeasurer(
            ctx.space,
            prompts,
            ctx.work_dir,
            ctx.control,
            ctx.count_launch,
            launcher=cmd,
            devices=ctx.worker.devices,
        )

    return make


# The recorded tiny-cpu surface's n-gram grid as a replay job (no engine runs): fill in
# ``name``, ``surface``, ``model`` (as the space's folder sees it) and ``trials``.
TINY_REPLAY_SPACE = """
name: {name}
engine: {{kind: replay, surface: {surface}, model: {model},
         served_model_name: tiny-target, max_model_len: 512, enforce_eager: true, device: cpu}}
methods:
  ngram:
    num_speculative_tokens: {{min: 1, max: 4}}
    prompt_lookup_min: {{min: 1, max: 2}}
    prompt_lookup_max: {{min: 3, max: 4}}
max_num_seqs: [4, 8]
memory_fraction: [0.15]
concurrency: [1, 4]
workload: {{builtin: code_completion, num_prompts: 12, max_tokens: 64, warmup_requests: 2}}
measurement: {{repeats: 3, confirm_top: 0}}
lossless: {{num_prompts: 6, max_tokens: 32}}
slo: {{p99_tpot_ms: 50}}
trials: {trials}
seed: 0
"""
TINY_SURFACE = REPO / "bench" / "surfaces" / "tiny-cpu.jsonl"

# An n-gram configuration on the CPU with every field the argv and env builders read.
NGRAM_CPU_CONFIG = EngineConfig(
    model="/m/target",
    served_model_name="t",
    max_model_len=256,
    max_num_seqs=4,
    memory_fraction=0.2,
    speculative_config={
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 4,
    },
    enforce_eager=True,
    cpu_kvcache_gib=2,
)


def run_fake_job(
    db_url: str,
    space: SearchSpace,
    work_dir: Path,
    launcher: list[str] | None = None,
    **run: Any,
) -> int:
    """Create a job for ``space`` and run it to its end on the FAKE engine ``launcher``
    (``fake_measurers``' default unless told); ``run``: more of ``run_job``'s keywords.
    Returns the job's id."""
    from tuner.job import create_job, run_job
    from tuner.storage import Store

    job_id = create_job(Store(db_url), space)
    run_job(Store(db_url), job_id, work_dir=work_dir, measurers=fake_measurers(launcher), **run)
    return job_id


def run_on_fake_sglang(db_url: str, tmp_path: Path, space: SearchSpace) -> list[dict]:
    """Run a job against the FAKE SGLang server (SGLang needs CUDA): its trial records."""
    launcher = [sys.executable, str(FAKE_SGLANG)]
    return trial_records(db_url, run_fake_job(db_url, space, tmp_path / "w", launcher))
