"""Real vLLM (CPU build) started with hub ids, ``--model spectune/tiny-target`` and the draft
``spectune/tiny-draft``, from an offline Hugging Face cache built from the tiny models: what a
job does after fetching its hub models. Slow (one launch, ~1 minute); one engine at a time:

    flock /tmp/engine.lock .venv/bin/python -m pytest -s -m engine \
        tests/engines/test_engine_vllm_hub.py
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.helpers import vllm_available
from tuner.engines import EngineConfig, VLLMServer

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed"),
    pytest.mark.timeout(900),
]


def test_vllm_serves_hub_ids_from_the_offline_cache(hf_cache, tmp_path):
    cfg = EngineConfig(
        model="spectune/tiny-target",
        served_model_name="tiny",
        max_model_len=512,
        max_num_seqs=4,
        memory_fraction=0.1,
        speculative_config={
            "method": "draft_model",
            "model": "spectune/tiny-draft",
            "num_speculative_tokens": 3,
        },
        enforce_eager=True,
    )
    log = tmp_path / "engine.log"
    with VLLMServer(cfg, log, cache_root=tmp_path / "cache", startup_timeout_s=300) as srv:
        body = json.dumps(
            {"model": "tiny", "prompt": "def add(a, b):\n", "max_tokens": 24, "temperature": 0}
        ).encode()
        req = urllib.request.Request(
            srv.base_url + "/v1/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.loads(r.read())
        assert srv.alive()
    print(f"\nstart-up {srv.startup_s:.1f} s; completion {answer['usage']}")
    assert answer["usage"]["completion_tokens"] > 0 and answer["choices"][0]["text"]
    text = log.read_text()
    assert "--model spectune/tiny-target " in text.splitlines()[0]
    assert '"model":"spectune/tiny-draft"' in text.splitlines()[0]
