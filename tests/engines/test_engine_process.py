"""The engine launcher's process handling, exercised with tiny stand-in processes."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import NGRAM_CPU_CONFIG
from tuner.engines import (
    ENGINE_KINDS,
    ENGINES,
    EngineConfig,
    EngineLaunchError,
    HostedProbe,
    HostedServer,
    ServerProcess,
    SGLangProbe,
    SGLangServer,
    VLLMProbe,
    VLLMServer,
    build_argv,
    build_env,
    classify_failure,
    parse_kv_cache_tokens,
    server_class,
    sglang_argv,
)

CFG = NGRAM_CPU_CONFIG


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


# A stand-in engine: logs vLLM's KV-capacity line, holds ~64 MiB, answers /health on --port.
READY_ENGINE = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
print("INFO kv_cache_utils.py:1 GPU KV cache size: 1,000 tokens", flush=True)
print("INFO kv_cache_utils.py:1 CPU KV cache size: 12,345 tokens", flush=True)
ballast = bytearray(64 * 2**20)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_ready_server_reports_kv_capacity_and_peak_rss(tmp_path):
    srv = _server(tmp_path, READY_ENGINE)
    assert srv.kv_cache_tokens() is None and srv.peak_rss_mb is None  # not started
    with srv:
        assert srv.alive() and srv.startup_s is not None
        assert srv.kv_cache_tokens() == 12345  # the last line the engine wrote
        time.sleep(1.2)  # a few samples of the process tree
        while_running = srv.peak_rss_mb
    assert srv.proc is None and not srv.alive()
    assert while_running is not None and while_running >= 64
    assert srv.peak_rss_mb is not None and srv.peak_rss_mb >= while_running
    assert srv.peak_rss_mb == round(srv.peak_rss_mb, 1)
    assert srv.kv_cache_tokens() == 12345  # kept after teardown


def test_kv_capacity_line():
    assert parse_kv_cache_tokens("x\nINFO GPU KV cache size: 262,144 tokens\n") == 262144
    assert parse_kv_cache_tokens("no such line") is None
    assert VLLMProbe().kv_cache_tokens("CPU KV cache size: 7 tokens") == 7
    assert SGLangProbe().kv_cache_tokens("CPU KV cache size: 7 tokens") is None
    assert HostedProbe().kv_cache_tokens("CPU KV cache size: 7 tokens") is None


def test_engine_registry_and_server_classes():
    assert ENGINE_KINDS == ("vllm", "sglang")
    assert ENGINES == {"vllm": VLLMServer, "sglang": SGLangServer}
    assert server_class("sglang") is SGLangServer and server_class("vllm") is VLLMServer
    with pytest.raises(ValueError, match="engine.kind: unknown 'replay'"):
        server_class("replay")
    assert not issubclass(SGLangServer, VLLMServer)
    assert issubclass(SGLangServer, ServerProcess) and issubclass(VLLMServer, ServerProcess)
    assert {c.kind for c in ENGINES.values()} == set(ENGINE_KINDS)
    assert isinstance(VLLMServer.probe, VLLMProbe) and isinstance(SGLangServer.probe, SGLangProbe)
    assert VLLMServer.headers is None and SGLangServer.headers is None


def test_sglang_server_argv_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_PROBE_VAR", "kept")
    cfg = EngineConfig(
        model="/m/target",
        served_model_name="t",
        max_num_seqs=4,
        memory_fraction=0.5,
        speculative_config={"method": "eagle", "model": "/m/e", "num_speculative_tokens": 2},
        device="cuda",
        extra_args=("--trust-remote-code",),
    )
    srv = SGLangServer(cfg, tmp_path / "s.log", cache_root=tmp_path / "c", python="/py")
    argv = srv._argv(4321)
    assert argv[:3] == ["/py", "-m", "sglang.launch_server"]
    assert argv[3:-2] == sglang_argv(cfg, host="127.0.0.1", port=4321)
    assert argv[-2:] == ["--enable-metrics", "--trust-remote-code"]
    env = srv._env()
    assert env["SPECTUNE_PROBE_VAR"] == "kept" and env["HF_HUB_OFFLINE"] == "1"
    assert env["SGLANG_CACHE_ROOT"] == str(tmp_path / "c")
    assert "VLLM_SERVER_DEV_MODE" not in env or os.environ.get("VLLM_SERVER_DEV_MODE")


def test_hosted_server_runs_nothing():
    h = HostedServer("https://api.example.com", {"Authorization": "Bearer k"})
    with h as same:
        assert same is h
    h.start()
    h.stop()
    assert h.kind == "hosted" and h.alive() and h.log_tail() == ""
    assert h.kv_cache_tokens() is None and h.peak_rss_mb is None and h.proc is None
    assert h.headers == {"Authorization": "Bearer k"} and h.base_url == "https://api.example.com"
    assert isinstance(h.probe, HostedProbe)
