"""The export is the measured command (issue 21 item 6): the ``vllm-cli`` export and the
report's winner command line carry every flag and every speed-relevant environment variable
the measured launch had, and nothing private to the machine. The launch's argv and
environment come from ``ServerProcess.command``, what ``start`` gives the process; nothing
is launched here."""

from __future__ import annotations

import os
import shlex

import pytest

from tests.helpers import NGRAM_CPU_CONFIG
from tuner.cli._render import report_text
from tuner.engines import EngineConfig, VLLMServer, _vllm, render_export
from tuner.pareto import Point, Report

CFG = EngineConfig(
    **{**NGRAM_CPU_CONFIG.to_dict(), "extra_args": ("--max-num-batched-tokens", "512")}
)

# The launcher's own environment: speed knobs a user set, and private things.
SHELL = {
    "HOME": "/home/u",
    "PATH": "/usr/bin",
    "OMP_NUM_THREADS": "2",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "VLLM_API_KEY": "s3cret",
    "VLLM_PORT": "9999",
}
# Written here, not read from the product: what the launch sets that must change no speed.
NOT_SPEED = {
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "VLLM_NO_USAGE_STATS",
    "DO_NOT_TRACK",
    "VLLM_CACHE_ROOT",
    "PYTHONUNBUFFERED",
    "VLLM_SERVER_DEV_MODE",
}
# Launch-only flags: where this one server listens and what it calls the model.
LAUNCH_ONLY = {"--host", "--port", "--served-model-name", "--model"}
BARE_LAUNCH_ONLY = {"--disable-uvicorn-access-log"}


@pytest.fixture
def shell(monkeypatch):
    families = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "VLLM_", "LD_", "MALLOC_")
    for k in list(os.environ):
        if k.startswith(families):
            monkeypatch.delenv(k)
    for k, v in SHELL.items():
        monkeypatch.setenv(k, v)


def _launch(tmp_path) -> tuple[list[str], dict[str, str]]:
    server = VLLMServer(CFG, tmp_path / "log", cache_root=tmp_path / "cache", python="/py")
    return server.command(12345)


def _words(line: str) -> tuple[dict[str, str], list[str]]:
    """(the ENV=VALUE prefix, the command after it) of an exported line."""
    words = shlex.split(line, comments=True)
    i = words.index("vllm")
    return dict(w.split("=", 1) for w in words[:i]), words[i:]


def _engine_part(argv: list[str]) -> list[str]:
    """The launch's argv less the interpreter and the launch-only flags."""
    out, i = [], 3  # python -m vllm.entrypoints.openai.api_server
    while i < len(argv):
        if argv[i] in LAUNCH_ONLY:
            i += 2
        elif argv[i] in BARE_LAUNCH_ONLY:
            i += 1
        else:
            out.append(argv[i])
            i += 1
    return out


def _report_line(cfg: EngineConfig) -> str:
    """What follows "Winner command line:" in the report of a job ``cfg`` won."""
    p = Point(
        1,
        "ngram",
        {**CFG.speculative_config, "max_num_seqs": 4},
        cfg.to_dict(),
        {"output_tok_per_s": 10.0, "p99_tpot_ms": 5.0, "concurrency": 1},
        True,
        (),
    )
    rep = Report(1, "w", 1, {}, [("output_tok_per_s", "maximize")], [p], [p], None, p, {}, {}, {})
    return report_text(rep).split("Winner command line:\n", 1)[1]


def test_export_and_report_carry_the_measured_env_and_flags(shell, tmp_path):
    argv, env = _launch(tmp_path)
    speed = {k: v for k, v in env.items() if os.environ.get(k) != v and k not in NOT_SPEED}
    speed |= {k: SHELL[k] for k in ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND")}
    # The OpenMP preload of the venv is in the launch, so it must be in the export.
    assert speed["LD_PRELOAD"].endswith("libiomp5.so")
    assert {"VLLM_TARGET_DEVICE", "VLLM_CPU_KVCACHE_SPACE"} <= set(speed)
    for line in (render_export("vllm-cli", CFG), _report_line(CFG)):
        exported_env, command = _words(line)
        assert exported_env == speed  # every speed variable, nothing private
        assert command[:3] == ["vllm", "serve", CFG.model]
        assert command[3:] == _engine_part(argv)  # every flag, in the launch's order
        assert "--max-num-batched-tokens" in command and "--enforce-eager" in command
        note, fix, last = line.splitlines()
        assert note.startswith("# LD_PRELOAD: a path on the measuring machine")
        assert fix.startswith("# SPECTUNE_VLLM_CPU_EXPAND_FIX=1: vLLM's CPU build samples")
        assert shlex.split(last)[-1] == command[-1]  # flags appended to the output land on it


def test_private_env_stays_out(shell):
    line = render_export("vllm-cli", CFG)
    for secret in ("s3cret", "9999", "/home/u", "/usr/bin", "HF_HUB_OFFLINE", "VLLM_CACHE_ROOT"):
        assert secret not in line


def test_a_change_to_the_launch_env_shows_in_the_export(shell, tmp_path, monkeypatch):
    real = _vllm.speed_env

    def more(cfg, base=None):
        return {**real(cfg, base), "KMP_BLOCKTIME": "7"}

    monkeypatch.setattr(_vllm, "speed_env", more)
    _, env = _launch(tmp_path)
    assert env["KMP_BLOCKTIME"] == "7"
    for line in (render_export("vllm-cli", CFG), _report_line(CFG)):
        assert _words(line)[0]["KMP_BLOCKTIME"] == "7"


def test_a_user_preload_is_kept_and_exported(shell, tmp_path, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/opt/jemalloc.so")
    _, env = _launch(tmp_path)
    assert env["LD_PRELOAD"] == "/opt/jemalloc.so"
    line = render_export("vllm-cli", CFG)
    assert _words(line)[0]["LD_PRELOAD"] == "/opt/jemalloc.so"
    assert "intel-openmp" not in line  # the note names only what it is
