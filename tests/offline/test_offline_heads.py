"""EAGLE, EAGLE-3 and MTP heads priced offline (the tiny in-repo heads, no engine): the
batched drafting chain against the same graph rerun step by step, prices at every depth,
and the heads it does not mirror refused with the reason."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers import TINY
from tuner.offline import TokenSequence, price_proposers
from tuner.offline._graphs import load_head
from tuner.offline._heads import _guesses, _Target

torch = pytest.importorskip("torch")

HEADS = {
    "eagle": ("eagle", TINY / "eagle", TINY / "target"),
    "eagle3": ("eagle3", TINY / "eagle3", TINY / "target"),
    "mtp": ("mtp", TINY / "target-mtp", TINY / "target-mtp"),
}


def _greedy(target, prompts, n=24):
    """Greedy continuations by transformers: what a baseline would have returned."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = m.generate(torch.tensor([p]), max_new_tokens=n, do_sample=False)[0].tolist()
            out.append(TokenSequence(tuple(p), tuple(ids[len(p) :])))
    return out


def _prompts():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TINY / "target"))
    texts = ["def add(a, b):\n    return", "for i in range(10):\n    print(", "import os\n"]
    return [tok(t)["input_ids"] for t in texts]


@pytest.mark.parametrize("name", sorted(HEADS))
def test_the_batched_chain_is_the_head_rerun_step_by_step(name):
    """Every round's guesses at depth 3 equal a plain causal rerun of the head over the
    context's features plus its own fed-back hidden states: the masks, positions and KV
    of the batched chain are the engine's order of work, not a shortcut."""
    method, path, target = HEADS[name]
    seq = _greedy(target, _prompts()[:1], 20)[0]
    tgt = _Target(str(target), "cpu")
    with torch.inference_mode():
        head = load_head(method, path, tgt.embed, tgt.lm_head, tgt.num_layers)
        feats = tgt.features(seq.tokens, {head.feature})[head.feature]
        first = len(seq.prompt) - 1
        got = _guesses(head, seq.tokens, feats, 3, first, "cpu")
        ids = torch.tensor(seq.tokens)

        def causal(i, q, k, v):
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        checked = 0
        for q0 in range(first, len(seq.tokens) - 3):
            hid = head.combine(feats[:, : q0 + 1])
            emb = head.embed[ids[1 : q0 + 2]][None]
            for j in range(3):
                pos = torch.arange(hid.shape[1])[None]
                h, logits = head.step(emb, hid, pos, causal)
                guess = int(head.to_target(logits[0, -1].argmax()))
                assert guess == got[q0, j], (name, q0, j)
                if j < 2:  # the next step reads its own hidden and the true token
                    hid = torch.cat([hid, h[:, -1:]], 1)
                    emb = torch.cat([emb, head.embed[ids[q0 + j + 2]][None, None]], 1)
            checked += 1
    assert checked >= 15


def test_heads_are_priced_at_every_depth_from_one_forward_of_their_target():
    seqs = _greedy(TINY / "target", _prompts(), 32)
    heads = {
        "e1": {"method": "eagle", "num_speculative_tokens": 3, "head": str(TINY / "eagle")},
        "e3": {"method": "eagle3", "num_speculative_tokens": 2, "head": str(TINY / "eagle3")},
    }
    prices = price_proposers(heads, seqs, 32, target=str(TINY / "target"))
    assert prices.unpriced == {}
    assert sorted(prices.by_proposer["e1"]) == [1, 2, 3]
    assert sorted(prices.by_proposer["e3"]) == [1, 2]
    # The trained heads guess the target's next token often; a wrong feature would not.
    for key in heads:
        assert prices.get(key, 1).per_position_acceptance[0] > 0.3, prices.to_json()


def _copy(src, tmp_path, name, **cfg):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    c = json.loads((dst / "config.json").read_text())
    c.update(cfg)
    (dst / "config.json").write_text(json.dumps(c))
    return str(dst)


def test_heads_it_does_not_mirror_are_unpriced_with_the_reason(tmp_path):
    seqs = _greedy(TINY / "target", _prompts()[:1], 8)
    heads = {
        "qwen": _copy(TINY / "eagle", tmp_path, "qwen", model_type="qwen3"),
        "fcnorm": _copy(
            TINY / "eagle3", tmp_path, "fcnorm", eagle_config={"norm_before_fc": True}
        ),
        "missing": str(tmp_path / "nothing"),
    }
    spec = {
        "qwen": {"method": "eagle", "head": heads["qwen"]},
        "fcnorm": {"method": "eagle3", "head": heads["fcnorm"]},
        "missing": {"method": "eagle", "head": heads["missing"]},
        "mtp": {"method": "mtp"},  # the Llama target has no MTP layers
    }
    prices = price_proposers(
        {k: {**c, "num_speculative_tokens": 2} for k, c in spec.items()},
        seqs,
        8,
        target=str(TINY / "target"),
    )
    assert prices.by_proposer == {}
    why = prices.unpriced
    assert "model_type 'qwen3'" in why["qwen"]
    assert "option norm_before_fc" in why["fcnorm"]
    assert "did not load" in why["missing"] and "config.json" in why["missing"]
    assert "MiMo's only" in why["mtp"]


def test_each_target_prices_its_proposers_on_its_own_baseline():
    """An MTP checkpoint is its own target: unpriced (saying why) until its baseline has
    token ids, then priced on those, while the main target's proposers use theirs."""
    from types import SimpleNamespace

    from tuner.search._offline import offline_prices
    from tuner.space import load_space

    space = load_space(TINY.parents[1] / "search_spaces" / "tiny-cpu-all-methods.yaml")
    mtp_target = space.methods.mtp.model
    main = _greedy(TINY / "target", _prompts()[:2], 12)
    mtp = _greedy(TINY / "target-mtp", _prompts()[:2], 12)

    def row(n, seqs, **params):
        stored = [[list(s.prompt), list(s.output), [12]] for s in seqs]
        return SimpleNamespace(
            number=n, params={"method": "none", **params}, token_sequences=stored
        )

    proposers = {
        "e1": {
            "method": "eagle",
            "num_speculative_tokens": 2,
            "head": space.methods.eagle.heads[0],
        },
        "mtp": {"method": "mtp", "num_speculative_tokens": 1, "target": mtp_target},
    }
    first = offline_prices(space, [row(0, main)], proposers)
    assert first is not None and sorted(first.by_proposer) == ["e1"]
    assert "its target's baseline has no token ids yet" in first.unpriced["mtp"]
    both = offline_prices(space, [row(0, main), row(1, mtp, target=mtp_target)], proposers)
    assert both is not None and sorted(both.by_proposer) == ["e1", "mtp"]
    assert "trial 0" in both.basis and "trial 1" in both.basis


def test_the_strategy_adds_a_targets_prices_once_its_baseline_has_run():
    """Prices are computed once per job, but an MTP proposer left waiting for its target's
    baseline is priced (and added) as soon as that baseline's outputs are stored."""
    from types import SimpleNamespace

    from tuner.search import SearchStrategy
    from tuner.space import load_space

    space = load_space(TINY.parents[1] / "search_spaces" / "tiny-cpu-all-methods.yaml")
    mtp_target = space.methods.mtp.model
    rows = []

    def row(n, seqs, **params):
        stored = [[list(s.prompt), list(s.output), [12]] for s in seqs]
        return SimpleNamespace(
            number=n, params={"method": "none", **params}, token_sequences=stored
        )

    strategy = SearchStrategy.__new__(SearchStrategy)  # what prices() reads, no store
    strategy.space, strategy._prices, strategy._deepest = space, None, {}
    strategy.trials = SimpleNamespace(current=lambda: SimpleNamespace(rows=list(rows)))
    strategy.__dict__["grid"] = [
        {"method": "none"},
        {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 3,
        },
        {"method": "mtp", "num_speculative_tokens": 1, "target": mtp_target},
    ]
    rows.append(row(0, _greedy(TINY / "target", _prompts()[:1], 12)))
    first = strategy.prices()
    assert first is not None and len(first.by_proposer) == 1 and len(first.unpriced) == 1
    assert strategy.prices() is first  # nothing new: not recomputed
    rows.append(row(1, _greedy(TINY / "target-mtp", _prompts()[:1], 12), target=mtp_target))
    now = strategy.prices()
    assert now is not None and len(now.by_proposer) == 2 and now.unpriced == {}
    assert now.by_proposer.items() >= first.by_proposer.items()


def test_an_eagle3_head_reading_layers_its_target_lacks_is_refused_when_built():
    """The layer check lives in the head (one ``HeadUnsupported``), not in each caller."""
    from tuner.offline._graphs import Eagle3, HeadUnsupported

    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 9]}}
    with pytest.raises(HeadUnsupported, match=r"reads layers the target lacks \(4 layers\)"):
        Eagle3({}, cfg, None, None, 4)
