"""Offline pricing of models named by Hugging Face hub id: a cached draft or head is priced
exactly as its folder is; one not in the cache is unpriced with the reason, never fetched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.hf_cache import TINY
from tuner.offline import TokenSequence, price_proposers

torch = pytest.importorskip("torch")


def _seqs():
    """Greedy continuations of the tiny target: what its baseline would have returned."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for p in ([5, 17, 300, 42, 8, 99], [1, 2, 3, 4, 5, 6, 7], [700, 12, 13, 700, 12]):
            ids = m.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False)[0].tolist()
            out.append(TokenSequence(tuple(p), tuple(ids[len(p) :])))
    return out


def test_a_cached_hub_draft_and_heads_price_as_their_folders(hf_cache):
    seqs = _seqs()

    def proposers(names: dict[str, str]) -> dict:
        return {
            "d": {"method": "draft_model", "num_speculative_tokens": 3, "draft": names["draft"]},
            "e3": {"method": "eagle3", "num_speculative_tokens": 2, "head": names["eagle3"]},
        }

    by_id = {"draft": "spectune/tiny-draft", "eagle3": "spectune/tiny-eagle3"}
    hub = price_proposers(proposers(by_id), seqs, 16, target="spectune/tiny-target")
    by_dir = {k: str(TINY / k) for k in by_id}
    folder = price_proposers(proposers(by_dir), seqs, 16, target=str(TINY / "target"))
    assert hub.unpriced == {} and folder.unpriced == {}
    assert hub.by_proposer == folder.by_proposer
    assert hub.get("d", 1).per_position_acceptance[0] > 0  # priced, not empty


def test_a_hub_model_not_in_the_cache_is_unpriced_with_the_reason(empty_hf_cache):
    prices = price_proposers(
        {
            "d": {"method": "draft_model", "num_speculative_tokens": 2, "draft": "org/draft"},
            "h": {"method": "eagle", "num_speculative_tokens": 2, "head": str(TINY / "eagle")},
            "m": {"method": "mtp", "num_speculative_tokens": 1},
        },
        [TokenSequence((1, 2, 3), (4, 5, 6))],
        6,
        target="org/target",
    )
    why = "not in the local Hugging Face cache with its weights"
    assert prices.unpriced["d"] == f"not priced offline: draft org/draft: {why}"
    assert prices.unpriced["h"] == f"not priced offline: target org/target: {why}"
    assert prices.unpriced["m"] == f"not priced offline: mtp head org/target: {why}"
    assert prices.by_proposer == {}


def test_transformers_loads_the_built_cache_by_hub_id(hf_cache):
    """What vLLM and transformers do with ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE=1``: a fresh
    process (huggingface_hub reads both once, at import)."""
    code = (
        "import json\n"
        "from huggingface_hub import snapshot_download\n"
        "from transformers import AutoConfig, AutoTokenizer\n"
        "snap = snapshot_download('spectune/tiny-target', local_files_only=True)\n"
        "cfg = AutoConfig.from_pretrained('spectune/tiny-eagle3')\n"
        "tok = AutoTokenizer.from_pretrained('spectune/tiny-target')\n"
        "print(json.dumps([snap, cfg.architectures, tok('def f(x):')['input_ids']]))\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(hf_cache), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    snap, archs, ids = json.loads(out.stdout.splitlines()[-1])
    assert snap.startswith(str(hf_cache)) and archs == ["LlamaForCausalLMEagle3"]
    from transformers import AutoTokenizer

    assert ids == AutoTokenizer.from_pretrained(str(TINY / "target"))("def f(x):")["input_ids"]
