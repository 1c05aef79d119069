"""The engine launcher's process handling, exercised with tiny stand-in processes."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tuner.engines import (
    EngineConfig,
    EngineLaunchError,
    VLLMServer,
    build_argv,
    build_env,
    classify_failure,
)

CFG = EngineConfig(
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


def test_argv_is_a_list_with_every_flag():
    argv = build_argv(CFG, 12345, python="/py")
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    pairs = dict(zip(argv[3::], argv[4::], strict=False))
    assert pairs["--model"] == "/m/target"
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "12345"
    assert pairs["--max-num-seqs"] == "4" and pairs["--gpu-memory-utilization"] == "0.2"
    assert pairs["--speculative-config"].startswith('{"method":"ngram"')
    assert "--enforce-eager" in argv


def test_env_offline_cpu_and_kv_space(tmp_path):
    env = build_env(CFG, tmp_path, base={"HOME": "/root", "VLLM_CPU_KVCACHE_SPACE": "9"})
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path)
    no_kv = EngineConfig(model="/m", cpu_kvcache_gib=None)
    env = build_env(no_kv, tmp_path, base={"VLLM_CPU_KVCACHE_SPACE": "9"})
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # the memory fraction then decides


def test_engine_key_changes_with_engine_settings_only():
    same = EngineConfig(**{**CFG.to_dict(), "extra_args": ()})
    assert same.key() == CFG.key()
    other = EngineConfig(**{**CFG.to_dict(), "extra_args": (), "max_num_seqs": 8})
    assert other.key() != CFG.key()


@pytest.mark.parametrize(
    "tail, rc, timed_out, reason",
    [
        ("", None, True, "startup_timeout"),
        (
            "ValueError: Available memory on node 0 (1/19 GiB) on startup is less than desired "
            "CPU memory utilization",
            1,
            False,
            "oom",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory", 1, False, "oom"),
        ("", -signal.SIGKILL, False, "oom"),
        ("api_server.py: error: unrecognized arguments: --bogus", 2, False, "invalid_config"),
        (
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "SpeculativeConfig",
            1,
            False,
            "invalid_config",
        ),
        ("Segmentation fault", -11, False, "crash"),
    ],
)
def test_classify_failure(tail, rc, timed_out, reason):
    assert classify_failure(tail, rc, timed_out) == reason


def _server(tmp_path: Path, code: str, timeout: float = 20.0) -> VLLMServer:
    script = tmp_path / "engine.py"
    script.write_text(code)
    return VLLMServer(
        CFG,
        tmp_path / "log" / "t.log",
        cache_root=tmp_path / "cache",
        startup_timeout_s=timeout,
        launcher=[sys.executable, str(script)],
    )


def test_crash_during_start_is_noticed_at_once(tmp_path):
    srv = _server(
        tmp_path, "import sys\nprint('Segmentation fault', flush=True)\nsys.exit(3)\n", timeout=60
    )
    t0 = time.monotonic()
    with pytest.raises(EngineLaunchError) as ei:
        srv.start()
    assert time.monotonic() - t0 < 10  # not the 60 s timeout
    assert ei.value.reason == "crash"
    assert "Segmentation fault" in ei.value.log_tail
    log = (tmp_path / "log" / "t.log").read_text()
    assert log.startswith("$ ") and "--speculative-config" in log  # the argv is kept


def test_oom_message_is_classified(tmp_path):
    srv = _server(tmp_path, "import sys\nprint('RuntimeError: out of memory')\nsys.exit(1)\n")
    with pytest.raises(EngineLaunchError) as ei:
        srv.start()
    assert ei.value.reason == "oom"


def test_startup_timeout_kills_the_process_group(tmp_path):
    # The "engine" spawns a worker child, then never becomes ready.
    code = (
        "import subprocess, sys, time, pathlib\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"pathlib.Path(r'{tmp_path}/child.pid').write_text(str(p.pid))\n"
        "time.sleep(300)\n"
    )
    srv = _server(tmp_path, code, timeout=3)
    with pytest.raises(EngineLaunchError) as ei:
        srv.start()
    assert ei.value.reason == "startup_timeout"
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the engine's worker survived teardown")
    assert srv.proc is None
