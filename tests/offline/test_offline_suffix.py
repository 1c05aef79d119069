"""Suffix decoding priced offline (``tuner.offline._suffix``): the replay drafts what vLLM's
own ``SuffixDecodingProposer`` drafts, round for round, on the same Arctic Inference cache;
the per-request trees ignore earlier requests and the global tree learns from them."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from tests.helpers import vllm_available
from tuner.offline import TokenSequence, price_proposers, replay_rounds
from tuner.offline._suffix import DEFAULTS, SuffixReplay

# vLLM's proposer driven as its engine drives it, one request at a time: each step hands it
# the tokens the step committed (the accepted drafts and the bonus), the request's tokens so
# far in the batch's token buffer; a finished request is stopped at the next request's step.
_VLLM_SUFFIX = """
import json, sys
from types import SimpleNamespace as NS
import numpy as np
from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer
seqs, k, knobs, max_tokens, mml = json.load(sys.stdin)
spec = NS(num_speculative_tokens=k, **{"suffix_decoding_" + a: b for a, b in knobs.items()})
prop = SuffixDecodingProposer(NS(speculative_config=spec, model_config=NS(max_model_len=mml)))
drafts = []
for n, (prompt, output) in enumerate(seqs):
    full, p = prompt + output, len(prompt)
    committed, sampled = 1, [output[0]]
    while committed < min(max_tokens, len(output)):
        ctx = p + committed
        buf = np.zeros((1, len(full) + 1), dtype=np.int32)
        buf[0, :ctx] = full[:ctx]
        rid = f"r{n}"
        batch = NS(req_ids=[rid], num_tokens_no_spec=[ctx], req_id_to_index={rid: 0},
                   num_prompt_tokens=[p], token_ids_cpu=buf)
        (d,) = prop.propose(k, batch, [sampled])
        d = [int(t) for t in d]
        drafts.append(d)
        a = 0
        while a < len(d) and ctx + a < len(full) and d[a] == full[ctx + a]:
            a += 1
        sampled = full[ctx : ctx + a + 1]
        committed += a + 1
json.dump(drafts, sys.stdout)
"""

KNOBS = {"max_tree_depth": 24, "max_cached_requests": 10000, "max_spec_factor": 1.0}


def _seqs(seed: int, n: int = 6) -> list[TokenSequence]:
    """Repetitive code-like token streams: a few motifs recurring within and across
    requests, so the trees have something to find and something to miss."""
    rng = random.Random(seed)
    motifs = [[rng.randrange(40) for _ in range(rng.randint(3, 9))] for _ in range(5)]
    out = []
    for _ in range(n):
        toks: list[int] = []
        while len(toks) < 90:
            toks += rng.choice(motifs) if rng.random() < 0.7 else [rng.randrange(40)]
        out.append(TokenSequence(tuple(toks[:40]), tuple(toks[40:90])))
    return out


def _replayed(seqs: list[TokenSequence], k: int, knobs: dict, max_tokens: int) -> list[list]:
    replay, drafts = SuffixReplay(dict(knobs), 512), []

    def propose(n: int, full: tuple[int, ...], ctx: int, kk: int) -> list[int]:
        drafts.append(replay.propose(n, full, ctx, kk))
        return drafts[-1]

    replay_rounds(seqs, k, max_tokens, propose)
    return drafts


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
@pytest.mark.parametrize(
    "k, knobs",
    [
        (8, KNOBS),
        (4, {**KNOBS, "max_cached_requests": 0}),
        (6, {**KNOBS, "max_tree_depth": 8, "min_token_prob": 0.3, "max_spec_factor": 0.5}),
    ],
)
def test_the_replay_drafts_what_vllms_own_proposer_drafts(k, knobs):
    """Round for round, on 6 requests of 50 tokens each. vLLM runs in a child process (as
    the n-gram check does: its import leaves the platform half set up here)."""
    seqs, knobs = _seqs(k), {**DEFAULTS, **knobs}
    rows = [[list(s.prompt), list(s.output)] for s in seqs]
    got = subprocess.run(
        [sys.executable, "-c", _VLLM_SUFFIX],
        input=json.dumps([rows, k, knobs, 48, 512]),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    want = json.loads(got.stdout)
    mine = _replayed(seqs, k, knobs, 48)
    assert len(want) > 20 and sum(map(len, want)) > 20  # it drafted something
    assert mine == want


def test_the_global_tree_learns_from_earlier_requests_and_the_local_ones_do_not():
    """The same request twice: with the global tree the repeat is drafted from the first
    response (every position accepted); with per-request trees only (0 cached requests) the
    repeat is priced as the first was."""
    (s,) = _seqs(1, 1)
    twice = [s, s]
    glob = replay_rounds(twice, 8, 48, SuffixReplay({}, 512).propose)
    once = replay_rounds([s], 8, 48, SuffixReplay({}, 512).propose)
    local = replay_rounds(twice, 8, 48, SuffixReplay({"max_cached_requests": 0}, 512).propose)
    local_once = replay_rounds([s], 8, 48, SuffixReplay({"max_cached_requests": 0}, 512).propose)
    assert glob.acceptance_rate > once.acceptance_rate + 0.2
    assert local.num_accepted_tokens == 2 * local_once.num_accepted_tokens
    assert local.num_drafts == 2 * local_once.num_drafts


def test_price_proposers_prices_every_suffix_depth():
    seqs = _seqs(3)
    config = {"method": "suffix", "num_speculative_tokens": 5, "max_cached_requests": 0}
    prices = price_proposers({"s": config}, seqs, 48, max_model_len=512)
    assert set(prices.by_proposer["s"]) == {1, 2, 3, 4, 5}
    for k, a in prices.by_proposer["s"].items():
        assert a == replay_rounds(seqs, k, 48, SuffixReplay(config, 512).propose)
        assert len(a.per_position_acceptance) == k and a.num_drafts > 0
