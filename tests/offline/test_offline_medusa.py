"""Medusa heads priced offline (the tiny in-repo heads, no engine): the feature they read,
the checkpoint layouts vLLM loads, prices at every depth, and heads it cannot read
refused with the reason. Against the engine: tests/offline/test_offline_vllm.py."""

from __future__ import annotations

import json

import pytest

from tests.helpers import TINY
from tuner.offline import TokenSequence, price_proposers
from tuner.offline._graphs import HeadUnsupported
from tuner.offline._heads import _Target
from tuner.offline._medusa import MedusaHeads

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors.torch")


def _seqs(n: int = 1, new: int = 24) -> list[TokenSequence]:
    """Greedy continuations of the code workload's prompts by transformers: what a baseline
    would have returned."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tuner.workloads import builtin_path, read_jsonl

    tok = AutoTokenizer.from_pretrained(str(TINY / "target"))
    m = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for p in read_jsonl(builtin_path("code_completion"))[:n]:
            prompt = tok(p.prompt)["input_ids"]
            ids = m.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False)[0]
            out.append(TokenSequence(tuple(prompt), tuple(ids.tolist()[len(prompt) :])))
    return out


def _seq() -> TokenSequence:
    return _seqs()[0]


def _write(path, tensors: dict, **cfg) -> str:
    path.mkdir(parents=True, exist_ok=True)
    safetensors.save_file(
        {k: v.clone().contiguous() for k, v in tensors.items()}, str(path / "m.safetensors")
    )
    base = {"model_type": "medusa", "hidden_size": 256, "vocab_size": 4096, "num_heads": 2}
    (path / "config.json").write_text(json.dumps({**base, **cfg}))
    return str(path)


def _features(seq: TokenSequence):
    tgt = _Target(str(TINY / "target"), "cpu")
    with torch.inference_mode():
        return tgt, tgt.features(seq.tokens, {"normed"})["normed"][0, :-1]


def test_a_head_at_zero_reads_the_feature_the_targets_lm_head_reads(tmp_path):
    """A block at zero leaves the feature as it is, so such a head with the target's
    lm_head guesses the target's own greedy next token: the guesses are read from the final
    normed hidden state at the position that produced the round's latest token."""
    seq = _seq()
    tgt, feats = _features(seq)
    zero = torch.zeros(256, 256)
    path = _write(
        tmp_path / "m",
        {
            "blocks.0.layers.0.weight": zero,
            "blocks.1.layers.0.weight": zero,
            "lm_heads.0.weight": tgt.lm_head.clone(),
            "lm_heads.1.weight": tgt.lm_head.clone(),
        },
    )
    with torch.inference_mode():
        got = MedusaHeads(path).guesses(feats, 3)
    n = len(seq.prompt)
    # Row q (the round after q + 2 tokens) reads the feature at q, which produced token
    # q + 1: a head at zero repeats that token, where a trained head guesses token q + 2.
    assert got[n - 1 :, 0].tolist() == list(seq.output)
    assert got[:, 1].tolist() == got[:, 0].tolist()  # the same head twice
    assert (got[:, 2] == -1).all()  # past its heads: nothing drafted


def test_vllms_other_layouts_read_as_its_own(tmp_path):
    """FasterDecoding's bare numeric names, ``medusa_heads.`` prefixes, a shared original
    lm_head and a truncated vocabulary with its token_map give the same guesses."""
    seq = _seq()
    _, feats = _features(seq)
    g = torch.Generator().manual_seed(0)
    w = [torch.randn(256, 256, generator=g) * 0.05 for _ in range(2)]
    b = [torch.randn(256, generator=g) * 0.05 for _ in range(2)]
    lm = [torch.randn(4096, 256, generator=g) for _ in range(2)]
    own = {
        **{f"blocks.{i}.layers.0.weight": w[i] for i in range(2)},
        **{f"blocks.{i}.layers.0.bias": b[i] for i in range(2)},
        **{f"lm_heads.{i}.weight": lm[i] for i in range(2)},
    }
    old = {
        **{f"{i}.0.linear.weight": w[i] for i in range(2)},
        **{f"{i}.0.linear.bias": b[i] for i in range(2)},
        **{f"{i}.1.weight": lm[i] for i in range(2)},
    }
    with torch.inference_mode():
        want = MedusaHeads(_write(tmp_path / "own", own)).guesses(feats, 2)
        assert (MedusaHeads(_write(tmp_path / "old", old)).guesses(feats, 2) == want).all()
        prefixed = {f"medusa_heads.{k}": v for k, v in own.items()}
        assert (MedusaHeads(_write(tmp_path / "pre", prefixed)).guesses(feats, 2) == want).all()
        shared = {**own, "lm_heads.1.weight": lm[1] * 0}
        one = MedusaHeads(_write(tmp_path / "shared", shared, original_lm_head=True))
        assert (one.guesses(feats, 2)[:, 0] == want[:, 0]).all()
        assert one.lm_heads[1] is one.lm_heads[0]
        keep = torch.unique(torch.cat([want.flatten(), torch.arange(0, 4096, 7)]))
        mapped = MedusaHeads(
            _write(tmp_path / "map", {**own, "token_map": keep}, truncated_vocab_size=len(keep))
        )
        assert (mapped.guesses(feats, 2) == want).all()  # every best token kept
        assert mapped.lm_heads[0].shape[0] == len(keep)


@pytest.mark.parametrize(
    ("cfg", "drop", "why"),
    [
        ({"num_heads": None}, None, "no head count"),
        ({}, "blocks.1.layers.0.weight", "weight blocks.1.layers.0.weight missing"),
        ({"truncated_vocab_size": 100}, None, "truncated_vocab_size without a token_map"),
    ],
)
def test_heads_it_cannot_read_are_refused_with_the_reason(tmp_path, cfg, drop, why):
    zero = torch.zeros(256, 256)
    w = {
        "blocks.0.layers.0.weight": zero,
        "blocks.1.layers.0.weight": zero,
        "lm_heads.0.weight": torch.zeros(4096, 256),
        "lm_heads.1.weight": torch.zeros(4096, 256),
    }
    w.pop(drop, None)
    with pytest.raises(HeadUnsupported, match=why):
        MedusaHeads(_write(tmp_path / "m", w, **cfg))


def test_the_tiny_medusa_heads_are_priced_at_every_depth(tmp_path):
    """The trained heads (scripts/train_medusa.py) guess the target's tokens more often than
    untrained ones would (nor would a wrong feature), at every depth; a head it cannot read
    is unpriced with its reason."""
    seqs = _seqs(4, 32)
    spec = {"method": "medusa", "num_speculative_tokens": 3, "head": str(TINY / "medusa")}
    bad = _write(tmp_path / "bad", {}, num_heads=None)
    got = price_proposers(
        {"m": spec, "bad": {**spec, "head": bad}}, seqs, 32, target=str(TINY / "target")
    )
    assert "no head count" in got.unpriced["bad"] and "m" not in got.unpriced
    assert sorted(got.by_proposer["m"]) == [1, 2, 3]
    # 0.33 measured; heads at zero (each repeating the latest token) 0.14 on these outputs
    assert got.get("m", 1).per_position_acceptance[0] > 0.2, got.to_json()
