"""bench/fidelity.py end to end against the FAKE OpenAI server: SpecTune's client and
``vllm bench serve`` time the same stream alike. The fake opens every answer with
empty-text chunks (tokens that print nothing yet), the case where timing at the first chunk
*with text* made TTFT several steps late and TPOT short. A smoke test of the harness and the
client's timing rules, not a fidelity figure (bench/fidelity.py on vLLM gives that)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import FAKE_SERVER, REPO, vllm_available
from tuner.client import wait_until_up
from tuner.engines import free_port


@pytest.mark.skipif(not vllm_available(), reason="vllm bench serve comes with vLLM")
def test_fidelity_bench_agrees_with_vllm_bench_on_the_fake_server(tmp_path):
    port = free_port()
    fake = subprocess.Popen(
        [
            sys.executable,
            str(FAKE_SERVER),
            "--port",
            str(port),
            "--served-model-name",
            "fake",
            "--fake-token-ms",
            "8",
            "--fake-empty-text-chunks",
            "4",
        ],
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_until_up(url + "/health", timeout_s=30, alive=lambda: fake.poll() is None)
        env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
        out = subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "fidelity.py"),
                "--url",
                url,
                "--model",
                "fake",
                "--concurrency",
                "2",
                "--runs",
                "1",
                "--num-prompts",
                "8",
                "--output-len",
                "24",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            check=True,
        )
    finally:
        fake.terminate()
        fake.wait(10)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["failed"] == 0
    assert 0.85 < res["tok_per_s_ratio"] < 1.15, res
    assert 0.85 < res["mean_tpot_ratio"] < 1.15, res
    assert 0.7 < res["mean_ttft_ratio"] < 1.4, res
