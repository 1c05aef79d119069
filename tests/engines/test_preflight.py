"""Pre-flight refusals: each costs milliseconds and names the field, and no engine starts."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tuner.engines import EngineConfig
from tuner.preflight import (
    PreflightError,
    device_memory_bytes,
    estimate_memory,
    preflight,
    safetensors_shapes,
)

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "models" / "tiny"
GIB = 2**30


def _safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    """A valid safetensors file with zero-filled bf16 tensors of the given shapes."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(offset))


def _head(dir: Path, *, hidden=256, fc_in=512, arch="LlamaForCausalLM", **extra) -> Path:
    dir.mkdir(parents=True)
    cfg = {
        "architectures": [arch],
        "hidden_size": hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 4096,
        **extra,
    }
    (dir / "config.json").write_text(json.dumps(cfg))
    _safetensors(dir / "model.safetensors", {"fc.weight": [hidden, fc_in]})
    return dir


def _cfg(spec=None, **kw) -> EngineConfig:
    return EngineConfig(model=str(TINY / "target"), speculative_config=spec, **kw)


def test_the_tiny_pair_passes_and_its_estimate_is_sane():
    est = preflight(
        _cfg(
            {"method": "draft_model", "model": str(TINY / "draft"), "num_speculative_tokens": 3},
            max_num_seqs=8,
            max_model_len=512,
            memory_fraction=0.15,
        )
    )
    assert est is not None and est.fits
    # Weights: the two safetensors files; KV: 2 x (5 + draft layers) x 4 heads x 64 x 2 bytes.
    files = (TINY / "target" / "model.safetensors", TINY / "draft" / "model.safetensors")
    assert est.weights_bytes == sum(f.stat().st_size for f in files)
    draft_layers = json.loads((TINY / "draft" / "config.json").read_text())["num_hidden_layers"]
    d = json.loads((TINY / "draft" / "config.json").read_text())
    d_per_tok = (
        2
        * draft_layers
        * d["num_key_value_heads"]
        * d.get("head_dim", d["hidden_size"] // d["num_attention_heads"])
        * 2
    )
    assert est.kv_cache_bytes == (2 * 5 * 4 * 64 * 2 + d_per_tok) * 512 * 8


def test_over_budget_memory_estimate_is_refused_naming_memory_fraction():
    # 8 sequences x 32k tokens of KV for the tiny target: 2*5*4*64*2 B * 262144 = 1.25 GiB.
    cfg = _cfg(max_model_len=32768, max_num_seqs=8, memory_fraction=0.1)
    with pytest.raises(
        PreflightError,
        match=r"^memory_fraction: 0.1 of 8.00 GiB is 0.80 GiB, "
        r"below the 1.26 GiB this candidate needs at least",
    ):
        preflight(cfg, memory_bytes=8 * GIB)
    assert preflight(cfg, memory_bytes=64 * GIB).fits  # the same candidate on a bigger node
    assert preflight(cfg, memory_bytes=None) is None  # unknown memory: not checked


def test_exact_cpu_kv_cache_is_checked_against_what_the_batch_needs():
    cfg = _cfg(max_model_len=32768, max_num_seqs=8, cpu_kvcache_gib=1)
    with pytest.raises(PreflightError, match=r"^engine.cpu_kvcache_gib: 1 GiB is below"):
        preflight(cfg, memory_bytes=8 * GIB)
    assert estimate_memory(_cfg(max_model_len=512, cpu_kvcache_gib=1), 8 * GIB).fits


def test_mismatched_tokenizer_is_refused(tmp_path):
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text((TINY / "draft" / "config.json").read_text())
    tok = json.loads((TINY / "draft" / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = list(vocab)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # same size, two ids swapped
    (draft / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(PreflightError, match=r"^methods.draft_model.drafts: .*different ids"):
        preflight(_cfg({"method": "draft_model", "model": str(draft)}), memory_bytes=None)


def test_wrong_size_eagle_head_is_refused(tmp_path):
    good = _head(tmp_path / "good")
    assert safetensors_shapes(good)["fc.weight"] == ([256, 512], "BF16")
    preflight(_cfg({"method": "eagle", "model": str(good)}), memory_bytes=None)
    # A head trained for a 384-wide target: hidden size and fc both give it away.
    wide = _head(tmp_path / "wide", hidden=384, fc_in=768)
    with pytest.raises(
        PreflightError,
        match=r"^methods.eagle.heads: head expects target "
        r"hidden size 384, the target has 256",
    ):
        preflight(_cfg({"method": "eagle", "model": str(wide)}), memory_bytes=None)
    # Right config, wrong fc (an EAGLE-3 fc in an EAGLE-1 head).
    bad_fc = _head(tmp_path / "badfc", fc_in=768)
    with pytest.raises(
        PreflightError,
        match=r"fc.weight has shape \[256, 768\], expected "
        r"\[256, 512\]",
    ):
        preflight(_cfg({"method": "eagle", "model": str(bad_fc)}), memory_bytes=None)


def test_eagle3_head_checks(tmp_path):
    ok = _head(
        tmp_path / "e3",
        fc_in=768,
        arch="LlamaForCausalLMEagle3",
        draft_vocab_size=1024,
        target_hidden_size=256,
    )
    preflight(_cfg({"method": "eagle3", "model": str(ok)}), memory_bytes=None)
    e1 = _head(tmp_path / "e1")
    with pytest.raises(PreflightError, match=r"^methods.eagle3.heads: .* is not an EAGLE-3 head"):
        preflight(_cfg({"method": "eagle3", "model": str(e1)}), memory_bytes=None)
    big = _head(tmp_path / "big", fc_in=768, arch="LlamaForCausalLMEagle3", draft_vocab_size=9999)
    with pytest.raises(PreflightError, match=r"draft_vocab_size 9999 exceeds target 4096"):
        preflight(_cfg({"method": "eagle3", "model": str(big)}), memory_bytes=None)


def test_mtp_needs_mtp_layers_and_a_depth_they_cover(tmp_path):
    with pytest.raises(PreflightError, match=r"^methods.mtp: the target checkpoint has no MTP"):
        preflight(_cfg({"method": "mtp", "num_speculative_tokens": 1}), memory_bytes=None)
    mtp = tmp_path / "mtp"
    mtp.mkdir()
    cfg = json.loads((TINY / "target" / "config.json").read_text())
    (mtp / "config.json").write_text(json.dumps({**cfg, "num_nextn_predict_layers": 1}))
    c = EngineConfig(
        model=str(mtp), speculative_config={"method": "mtp", "num_speculative_tokens": 1}
    )
    preflight(c, memory_bytes=None)
    c2 = EngineConfig(
        model=str(mtp), speculative_config={"method": "mtp", "num_speculative_tokens": 2}
    )
    with pytest.raises(
        PreflightError,
        match=r"num_speculative_tokens: 2 exceeds the "
        r"checkpoint's 1 MTP layers",
    ):
        preflight(c2, memory_bytes=None)


def test_device_memory_is_known_here():
    mem = device_memory_bytes("cpu")
    assert mem is not None and mem > GIB
