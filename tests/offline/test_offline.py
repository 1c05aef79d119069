"""Offline acceptance: vLLM's n-gram rule, its counters' round rules, a draft's teacher-forced
guesses, and the guide launching by offline prices (FAKE chain surface)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import TINY, vllm_available
from tests.search.chain_surface import ACCEPT, SPACE, point, proposer
from tests.search.test_guided import BASE, _row
from tuner.offline import (
    DraftGuesses,
    OfflineAcceptance,
    OfflinePrices,
    TokenSequence,
    ngram_propose,
    price_proposers,
    replay_rounds,
)
from tuner.search import family_key, propose
from tuner.space import loads_space
from tuner.surface import grid_configs


def test_ngram_takes_the_longest_suffix_match_and_its_earliest_occurrence():
    #        0  1  2  3  4  5  6  7  8  9
    toks = [5, 1, 2, 7, 1, 2, 8, 9, 1, 2]
    # suffix (1, 2) occurs at 1 and 4: the earliest wins, drafting what followed it.
    assert ngram_propose(toks, 3, 1, 3) == [7, 1, 2]
    assert ngram_propose(toks, 3, 3, 3) == []  # (9, 1, 2) never occurred before
    assert ngram_propose([1, 2, 3, 1], 5, 1, 2) == [2, 3, 1]  # the context ends first
    assert ngram_propose(toks, 3, 1, 3, max_model_len=11) == [7]  # room for one more


_VLLM_NGRAM = """
import json, random, sys
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as f
rng = random.Random(0)
out = []
for _ in range(3000):
    toks = [rng.randrange(rng.randint(2, 6)) for _ in range(rng.randint(1, 50))]
    lo = rng.randint(1, 3)
    hi, k = rng.randint(lo, 5), rng.randint(1, 5)
    want = f.py_func(np.array(toks, dtype=np.int32), lo, hi, 512, k).tolist()
    out.append([toks, lo, hi, k, want])
json.dump(out, sys.stdout)
"""


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
def test_ngram_agrees_with_vllms_own_proposer():
    """The same drafts as vLLM 0.32's KMP pass on 3,000 random short contexts. vLLM runs in
    a child process: importing its n-gram module here leaves its platform half set up, and a
    later test's import of its CPU kernels then dies (illegal instruction)."""
    got = subprocess.run(
        [sys.executable, "-c", _VLLM_NGRAM], capture_output=True, text=True, timeout=300
    )
    assert got.returncode == 0, got.stderr[-2000:]
    cases = json.loads(got.stdout)
    assert len(cases) == 3000
    for toks, lo, hi, k, want in cases:
        assert ngram_propose(toks, k, lo, hi, 512) == want, (toks, lo, hi, k)


def test_rounds_count_as_vllms_counters_count():
    """A round drafting nothing is no draft; an accepted prefix plus the bonus is committed;
    position i counts only when 1..i all were accepted."""
    seq = TokenSequence((9,), (1, 2, 3, 4, 5, 6, 7))
    plans = {1: [2, 3, 0], 4: [5, 0, 0], 6: []}  # committed count -> draft

    def propose_(n, full, ctx, k):
        return plans.get(ctx - 1, [0] * k)[:k]

    got = replay_rounds([seq], 3, 7, propose_)
    # committed 1: [2,3,0] accepts 2 -> commits 3, at 4: [5,0,0] accepts 1 -> 6;
    # at 6: nothing drafted -> 7: done.
    assert got.num_drafts == 2 and got.num_draft_tokens == 6 and got.num_accepted_tokens == 3
    assert got.per_position_acceptance == (1.0, 0.5, 0.0)
    assert got.mean_acceptance_length == pytest.approx(2.5)
    assert got.acceptance_rate == pytest.approx(0.5)


def test_teacher_forced_guesses_are_the_drafts_own_greedy_chain():
    """Where every earlier guess was right, the teacher-forced argmax is exactly what the
    draft would have generated from its own guesses (the tiny in-repo draft)."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    prompt = tuple(range(5, 25))
    model = AutoModelForCausalLM.from_pretrained(str(TINY / "draft"), dtype=torch.float32)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)
    own = tuple(out[0, len(prompt) :].tolist())
    seq = TokenSequence(prompt, own)  # the draft's own chain taken as the target's
    g = DraftGuesses(TINY / "draft", [seq])
    assert g.propose(0, seq.tokens, len(prompt), 6) == list(own)
    a = replay_rounds([seq], 4, 6, g.propose)
    assert a.per_position_acceptance[0] == 1.0 and a.num_drafts >= 1


def test_prices_cover_every_depth_and_say_why_a_proposer_is_not_priced():
    seqs = [TokenSequence((1, 2, 3, 1, 2), (3, 1, 2, 3, 1, 2, 3, 9))]
    prices = price_proposers(
        {
            "ng": {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "prompt_lookup_min": 1,
                "prompt_lookup_max": 2,
            },
            "head": {"method": "eagle", "num_speculative_tokens": 2, "head": "no/such/head"},
        },
        seqs,
        6,
        target="no/such/target",
    )
    assert sorted(prices.by_proposer["ng"]) == [1, 2, 3]
    assert prices.get("ng", 3).per_position_acceptance[0] == 1.0
    assert "no/such/target did not load" in prices.unpriced["head"]
    back = OfflinePrices.from_json(prices.to_json())
    assert back.get("ng", 2) == prices.get("ng", 2) and back.unpriced == prices.unpriced


def _prices(space) -> OfflinePrices:
    by: dict[str, dict[int, OfflineAcceptance]] = {}
    for c in grid_configs(space):
        if c["method"] != "none":
            k = int(c["num_speculative_tokens"])
            pp = tuple(ACCEPT[proposer(c)][:k])
            by.setdefault(family_key(c), {})[k] = OfflineAcceptance(k, pp, 100, 100 * k, 0)
    sizes = {fk: 0.1 for fk in by if '"draft"' in fk or '"head"' in fk}
    return OfflinePrices(by, {}, "exact (FAKE chain surface)", 0.0, sizes)


def test_the_guide_launches_by_offline_price_and_finds_the_best_in_three(tmp_path):
    """With every proposer priced, launches after the baseline follow the predicted speed,
    not a scan in the prior order of methods; the priors on step cost are wrong here (the
    FAKE surface's EAGLE head costs twice the prior), and one launch of a method corrects
    them: within three launches the best configuration is within 3% of the truth's best."""
    space = loads_space(SPACE, base_dir=tmp_path)
    rows = [_row(0, BASE)]
    prices = _prices(space)
    for n in range(1, 4):
        prop = propose(space, rows, lambda c: 0.4, prices=prices)
        assert prop is not None and prop.by == "guide: offline"
        assert prop.predicted is not None and prop.predicted["value"] > 0
        rows.append(_row(n, prop.params))
    best = max(point(c, 4)["output_tok_per_s"] for c in grid_configs(space))
    got = max(point(r.params, 4)["output_tok_per_s"] for r in rows)
    assert got >= 0.97 * best, (got, best, [r.params for r in rows])


def test_a_proposer_that_cannot_beat_the_incumbent_is_not_launched(tmp_path):
    """Once the incumbent is out of a proposer's reach even with no overhead, the guide says
    so and does not launch it."""
    space = loads_space(SPACE, base_dir=tmp_path)
    head = {"method": "eagle", "head": "head", "max_num_seqs": 4, "memory_fraction": 0.4}
    rows = [_row(0, BASE), _row(1, {**head, "num_speculative_tokens": 6})]
    prices = _prices(space)
    weak = next(fk for fk in prices.by_proposer if '"prompt_lookup_min": 2' in fk)
    for k in list(prices.by_proposer[weak]):
        prices.by_proposer[weak][k] = OfflineAcceptance(k, (0.01,) * k, 100, 100 * k, 1)
    seen = []
    for n in range(2, 12):
        prop = propose(space, rows, lambda c: 0.4, prices=prices)
        if prop is None:
            break
        seen.append(prop)
        rows.append(_row(n, prop.params))
    assert all(family_key(p.params) != weak for p in seen)
    assert any(
        "cannot beat the incumbent" in s and "prompt_lookup_min=2" in s
        for p in seen
        for s in p.skipped
    )
