"""Sampled offline pricing (``tuner.offline._sampled``) on the tiny in-repo pair.

The check that matters: the price computed on the baseline's own samples agrees with
speculative decoding actually run under sampling. The reference here is a rejection sampler
written out in torch over the tiny target (accept guess j with probability p(g_j), else a
draw from the residual; a bonus draw when every guess was accepted): a simulation of the
engine's rule, clearly not the engine (``tests/engines/test_sampling_vllm.py`` and
``bench/sampled_pricing.py`` compare with vLLM itself).
"""

from __future__ import annotations

import pytest

from tests.helpers import TINY
from tuner.offline import (
    OfflinePrices,
    TokenSequence,
    ngram_propose,
    price_proposers,
    replay_rounds,
)
from tuner.offline._sampled import TargetProbs, draft_chains, price_sampled, sampling_probs
from tuner.workloads import builtin_path, read_jsonl

torch = pytest.importorskip("torch")

SAMPLING = {"temperature": 0.8, "top_p": 0.95}
MAX_TOKENS = 40
K = 3


def _prompts(n: int) -> list[tuple[int, ...]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TINY / "target"))
    texts = [p.prompt for p in read_jsonl(builtin_path("code_completion"))[:n]]
    return [tuple(tok(t)["input_ids"][-96:]) for t in texts]


def _sample(model, ctx: list[int], sampling, gen) -> int:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ctx])).logits[0, -1:]
    return int(torch.multinomial(sampling_probs(logits, sampling)[0], 1, generator=gen))


def test_the_engines_probabilities_follow_temperature_top_k_top_p_and_min_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    p = sampling_probs(logits, {"temperature": 0.5})
    assert torch.allclose(p, (logits / 0.5).softmax(-1))
    p = sampling_probs(logits, {"temperature": 1.0, "top_k": 2})
    assert p[0, 2:].sum() == 0 and torch.allclose(p[0, :2], logits[0, :2].softmax(-1))
    full = logits.softmax(-1)[0]  # 0.644, 0.237, 0.087, 0.032
    p = sampling_probs(logits, {"temperature": 1.0, "top_p": 0.85})
    assert (p[0] > 0).tolist() == [True, True, False, False]  # 0.644 + 0.237 reach 0.85
    p = sampling_probs(logits, {"temperature": 1.0, "min_p": 0.2})
    assert (p[0] > 0).tolist() == [True, True, False, False]  # 0.087 < 0.2 * 0.644
    assert float(full[0]) == pytest.approx(0.6439, abs=1e-3)


def test_near_zero_temperature_prices_exactly_as_the_greedy_replay():
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32)
    seqs = []
    for p in _prompts(3):
        out = target.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS + K, do_sample=False)
        seqs.append(TokenSequence(p, tuple(out[0, len(p) :].tolist())))

    def ngram(n, full, ctx, k):
        return ngram_propose(full[:ctx], k, 1, 3)

    cold = {"temperature": 1e-6}
    got = price_sampled(seqs, K, MAX_TOKENS, ngram, TargetProbs(str(TINY / "target")), cold)
    for k in range(1, K + 1):
        want = replay_rounds(seqs, k, MAX_TOKENS, ngram)
        assert got[k].num_drafts == want.num_drafts and got[k].num_draft_tokens > 0
        assert got[k].num_accepted_tokens == want.num_accepted_tokens
        assert got[k].per_position_acceptance == pytest.approx(want.per_position_acceptance)


def _simulate(target, prompts, propose, sampling, seed: int) -> tuple[float, list[float]]:
    """Speculative decoding by the rejection rule (module docstring): acceptance rate and
    per-position acceptance over every round."""
    gen = torch.Generator().manual_seed(seed)
    drafted = accepted = rounds = 0
    per_pos = [0] * K
    for n, prompt in enumerate(prompts):
        ctx = list(prompt) + [_sample(target, list(prompt), sampling, gen)]
        while len(ctx) - len(prompt) < MAX_TOKENS:
            guess = list(propose(n, tuple(ctx), len(ctx), K))[:K]
            if not guess:
                ctx.append(_sample(target, ctx, sampling, gen))
                continue
            with torch.inference_mode():
                logits = target(input_ids=torch.tensor([ctx + guess])).logits[0]
            probs = sampling_probs(logits[len(ctx) - 1 :], sampling)
            rounds += 1
            drafted += len(guess)
            a = 0
            for j, g in enumerate(guess):
                if float(torch.rand(1, generator=gen)) < float(probs[j, g]):
                    a += 1
                    per_pos[j] += 1
                    continue
                rest = probs[j].clone()
                rest[g] = 0.0
                nxt = int(torch.multinomial(rest / rest.sum(), 1, generator=gen))
                break
            else:
                nxt = int(torch.multinomial(probs[len(guess)], 1, generator=gen))
            accepted += a
            ctx += guess[:a] + [nxt]
    return accepted / drafted, [c / rounds for c in per_pos]


def _baseline_samples(target, prompts, sampling, seed: int) -> list[TokenSequence]:
    """The baseline's sampled outputs: plain sampling from the target."""
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for p in prompts:
        ctx = list(p)
        for _ in range(MAX_TOKENS + K):
            ctx.append(_sample(target, ctx, sampling, gen))
        seqs.append(TokenSequence(p, tuple(ctx[len(p) :])))
    return seqs


@pytest.mark.parametrize("proposer", ["ngram", "draft"])
def test_the_price_on_sampled_outputs_matches_speculative_decoding_under_sampling(proposer):
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32)
    target.eval()
    prompts = _prompts(12)
    seqs = _baseline_samples(target, prompts, SAMPLING, seed=1)
    if proposer == "ngram":

        def propose(n, full, ctx, k):
            return ngram_propose(full[:ctx], k, 1, 3)

        cfg = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    else:
        draft = AutoModelForCausalLM.from_pretrained(str(TINY / "draft"), dtype=torch.float32)

        def propose(n, full, ctx, k):  # the draft's own greedy chain from the context
            with torch.inference_mode():
                out = draft.generate(torch.tensor([full[:ctx]]), max_new_tokens=k, do_sample=False)
            return out[0, ctx:].tolist()

        cfg = {"method": "draft_model", "draft": str(TINY / "draft")}
    rate, per_pos = _simulate(target, prompts, propose, SAMPLING, seed=2)
    prices = price_proposers(
        {"p": {**cfg, "num_speculative_tokens": K}},
        seqs,
        MAX_TOKENS,
        target=str(TINY / "target"),
        sampling=SAMPLING,
    )
    got = prices.get("p", K)
    assert got is not None, prices.unpriced
    assert "sampled (temperature 0.8, top_p 0.95)" in prices.basis
    # Different draws of the same distribution on both sides: a few hundred rounds each.
    assert got.acceptance_rate == pytest.approx(rate, abs=0.05), (got, rate, per_pos)
    assert got.per_position_acceptance[0] == pytest.approx(per_pos[0], abs=0.07)
    assert got.per_position_acceptance[1] > 0 and per_pos[1] > 0


def test_a_draft_chain_follows_its_own_guesses_not_the_sample():
    prompt = _prompts(1)[0]
    seq = TokenSequence(prompt, (0,) * (MAX_TOKENS + K))  # a sample the draft never guesses
    chain = draft_chains(str(TINY / "draft"), [seq], K, MAX_TOKENS)
    from transformers import AutoModelForCausalLM

    draft = AutoModelForCausalLM.from_pretrained(str(TINY / "draft"), dtype=torch.float32)
    ctx = len(prompt) + 5
    out = draft.generate(torch.tensor([seq.tokens[:ctx]]), max_new_tokens=K, do_sample=False)
    assert chain(0, seq.tokens, ctx, K) == out[0, ctx:].tolist()


def test_sampled_pricing_says_why_a_proposer_is_not_priced():
    seq = TokenSequence(_prompts(1)[0], (1, 2, 3) * 20)
    gone = price_proposers(
        {
            "n": {
                "method": "ngram",
                "prompt_lookup_min": 1,
                "prompt_lookup_max": 3,
                "num_speculative_tokens": 2,
            }
        },
        [seq],
        40,
        target="/nonexistent/target",
        sampling=SAMPLING,
    )
    assert gone.by_proposer == {} and "target /nonexistent/target" in gone.unpriced["n"]


def _simulate_probabilistic(target, draft, prompts, sampling, seed: int) -> float:
    """vLLM's probabilistic drafting by its rule (a simulation, not the engine): the draft
    draws each guess from softmax(logits / T), accepted with min(1, p/q), else a draw from
    the residual max(0, p - q); a bonus draw when all were accepted."""
    gen = torch.Generator().manual_seed(seed)
    t = sampling["temperature"]
    drafted = accepted = 0
    for prompt in prompts:
        ctx = list(prompt) + [_sample(target, list(prompt), sampling, gen)]
        while len(ctx) - len(prompt) < MAX_TOKENS:
            guess, qs = [], []
            for _ in range(K):
                with torch.inference_mode():
                    logits = draft(input_ids=torch.tensor([ctx + guess])).logits[0, -1]
                q = (logits / t).softmax(-1)
                guess.append(int(torch.multinomial(q, 1, generator=gen)))
                qs.append(q)
            with torch.inference_mode():
                logits = target(input_ids=torch.tensor([ctx + guess])).logits[0]
            probs = sampling_probs(logits[len(ctx) - 1 :], sampling)
            drafted += K
            a = 0
            for j, g in enumerate(guess):
                p, q = probs[j], qs[j][: probs.shape[-1]]
                if float(torch.rand(1, generator=gen)) < min(1.0, float(p[g] / q[g])):
                    a += 1
                    continue
                rest = (p - q).clamp(min=0)
                nxt = int(torch.multinomial(rest / rest.sum(), 1, generator=gen))
                break
            else:
                nxt = int(torch.multinomial(probs[K], 1, generator=gen))
            accepted += a
            ctx += guess[:a] + [nxt]
    return accepted / drafted


def test_a_probabilistic_draft_is_priced_by_its_overlap_with_the_target():
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained(str(TINY / "draft"), dtype=torch.float32)
    prompts = _prompts(12)
    seqs = _baseline_samples(target.eval(), prompts, SAMPLING, seed=1)
    rate = _simulate_probabilistic(target, draft.eval(), prompts, SAMPLING, seed=3)
    cfg = {"method": "draft_model", "draft": str(TINY / "draft"), "num_speculative_tokens": K}
    prices = price_proposers(
        {"greedy": cfg, "prob": {**cfg, "draft_sample_method": "probabilistic"}},
        seqs,
        MAX_TOKENS,
        target=str(TINY / "target"),
        sampling=SAMPLING,
    )
    got = prices.get("prob", K)
    assert got is not None, prices.unpriced
    assert got.acceptance_rate_se is not None and 0 < got.acceptance_rate_se < 0.05
    assert got.acceptance_rate == pytest.approx(rate, abs=max(0.05, 3 * got.acceptance_rate_se))
    # Not the greedy chain's price: a sampled guess is another proposer.
    assert got.acceptance_rate != pytest.approx(prices.get("greedy", K).acceptance_rate, abs=1e-3)
    pp = got.per_position_acceptance
    assert all(a >= b for a, b in zip(pp, pp[1:], strict=False))


def test_a_sampled_price_states_its_error_over_the_draws():
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32)
    prompts = _prompts(6)
    few = _baseline_samples(target.eval(), prompts, SAMPLING, seed=4)
    more = few + _baseline_samples(target, prompts * 3, SAMPLING, seed=5)
    cfg = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    cfg["num_speculative_tokens"] = K
    args = {"target": str(TINY / "target"), "sampling": SAMPLING}
    one = price_proposers({"n": cfg}, few, MAX_TOKENS, **args).get("n", K)
    four = price_proposers({"n": cfg}, more, MAX_TOKENS, **args).get("n", K)
    assert one.acceptance_rate_se > 0 and len(one.per_position_se) == K
    # Four draws a prompt: the error shrinks about as 1/sqrt(draws).
    assert four.acceptance_rate_se < 0.8 * one.acceptance_rate_se
    back = OfflinePrices.from_json(OfflinePrices({"n": {K: four}}).to_json()).get("n", K)
    assert back.acceptance_rate_se == pytest.approx(four.acceptance_rate_se, abs=1e-5)
    greedy = price_proposers({"n": cfg}, few, MAX_TOKENS).get("n", K)
    assert greedy.acceptance_rate_se is None  # a greedy replay is exact on its prompts
