"""Acceptance under sampling, priced from the baseline's own sampled outputs.

Why this is an expectation, not a replay: with greedy drafting (n-gram lookups, a draft
model's argmax, a head's chain) the engine accepts guess j with probability p(g_j), the
target's probability of that token after the request's temperature, top-k, top-p and min-p
(vLLM's rejection sampler with no draft probabilities), so position j of a round is accepted
with prod_{i<=j} p(g_i | context, g_<i). One forward of the target over the context and the
round's own guesses gives every factor. The contexts are the baseline's sampled outputs: a
lossless engine serves that very distribution, so they are a sample of the contexts a
speculative engine meets. A round advances past the guesses the sample itself took, plus
one (at temperature 0 this is the greedy replay exactly). With probabilistic drafting
(``draft_sample_method: probabilistic``) the guess is itself a draw and the per-position
rate would be E[min(1, p/q)]: not priced here, said so, and launched to learn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuner.offline._rounds import OfflineAcceptance, Proposer, TokenSequence

__all__ = ["TargetProbs", "draft_chains", "price_sampled", "sampling_probs"]

_ROWS = 16  # rounds per target forward


def sampling_probs(logits: Any, sampling: Mapping[str, Any]) -> Any:
    """Probabilities the engine samples from, per row of ``logits`` (vLLM's order:
    temperature, then top-k and top-p on the scaled logits, min-p on their softmax)."""
    import torch

    t = float(sampling.get("temperature") or 0.0)
    x = logits.float() / max(t, 1e-5)
    top_k = sampling.get("top_k")
    if top_k and 0 < int(top_k) < x.shape[-1]:
        kth = torch.topk(x, int(top_k), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    top_p = sampling.get("top_p")
    if top_p is not None and float(top_p) < 1.0:
        srt, idx = torch.sort(x, dim=-1, descending=False)
        cum = srt.softmax(-1).cumsum(-1)
        drop = cum <= 1.0 - float(top_p)
        drop[..., -1] = False  # the most likely token always stays
        x = x.masked_fill(drop.scatter(-1, idx, drop), float("-inf"))
    probs = x.softmax(-1)
    min_p = sampling.get("min_p")
    if min_p:
        keep = probs >= float(min_p) * probs.max(-1, keepdim=True).values
        probs = (probs * keep).div((probs * keep).sum(-1, keepdim=True))
    return probs


def _load(path: str, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()


def _last_logits(model: Any, rows: Sequence[Sequence[int]], device: str) -> Any:
    """Logits at every position of right-padded ``rows`` (one forward)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, device=device)
        mask[i, : len(r)] = 1
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask).logits


class TargetProbs:
    """The target's sampling probabilities of each round's guesses."""

    def __init__(self, path: str, device: str = "cpu") -> None:
        self.model, self.device = _load(path, device), device

    def of(
        self, rounds: Sequence[tuple[tuple[int, ...], Sequence[int]]], sampling: Mapping[str, Any]
    ) -> list[list[float]]:
        """``rounds``: (context ids, guesses); p(g_j | context, g_<j) for each guess."""
        out: list[list[float]] = []
        for lo in range(0, len(rounds), _ROWS):
            part = rounds[lo : lo + _ROWS]
            logits = _last_logits(self.model, [tuple(c) + tuple(g) for c, g in part], self.device)
            for i, (ctx, guess) in enumerate(part):
                if not guess:
                    out.append([])
                    continue
                at = logits[i, len(ctx) - 1 : len(ctx) - 1 + len(guess)]
                probs = sampling_probs(at, sampling)
                out.append([float(probs[j, int(t)]) for j, t in enumerate(guess)])
        return out


def draft_chains(
    path: str, seqs: Sequence[TokenSequence], depth: int, max_tokens: int, device: str = "cpu"
) -> Proposer:
    """A draft model's own greedy chain from every round start of every sequence (``depth``
    forwards per batch of starts): under sampling a later guess follows the draft's earlier
    guesses, not the sample, since a guess the sample did not take may still be accepted."""
    model = _load(path, device)
    chains: dict[tuple[int, int], list[int]] = {}
    for n, s in enumerate(seqs):
        full, p = s.tokens, len(s.prompt)
        limit = min(s.max_tokens or max_tokens, len(s.output))
        starts = list(range(p + 1, p + limit))
        for lo in range(0, len(starts), _ROWS):
            part = starts[lo : lo + _ROWS]
            got: list[list[int]] = [[] for _ in part]
            for _ in range(depth):
                rows = [full[:c] + tuple(g) for c, g in zip(part, got, strict=True)]
                logits = _last_logits(model, rows, device)
                for i, r in enumerate(rows):
                    got[i].append(int(logits[i, len(r) - 1].argmax()))
            chains.update({(n, c): g for c, g in zip(part, got, strict=True)})

    def propose(n: int, full: tuple[int, ...], ctx: int, k: int) -> list[int]:
        return chains.get((n, ctx), [])[:k]

    return propose


def price_sampled(
    seqs: Sequence[TokenSequence],
    depth: int,
    max_tokens: int,
    propose: Proposer,
    target: TargetProbs,
    sampling: Mapping[str, Any],
) -> dict[int, OfflineAcceptance]:
    """Expected acceptance at every depth 1..``depth`` over the sampled sequences (module
    docstring); the counts are expectations rounded to whole tokens."""
    walks: dict[int, list[tuple[int, int, int]]] = {}  # depth -> rounds (seq, ctx, guesses)
    need: dict[tuple[int, int], list[int]] = {}
    for k in range(1, depth + 1):
        walk = walks.setdefault(k, [])
        for n, s in enumerate(seqs):
            full, p = s.tokens, len(s.prompt)
            limit = min(s.max_tokens or max_tokens, len(s.output))
            committed = 1
            while committed < limit:
                ctx = p + committed
                guess = list(propose(n, full, ctx, depth))[:depth]
                if not guess[:k]:
                    committed += 1
                    continue
                need[(n, ctx)] = guess
                walk.append((n, ctx, len(guess[:k])))
                took = 0
                while took < min(k, len(guess)) and ctx + took < len(full):
                    if guess[took] != full[ctx + took]:
                        break
                    took += 1
                committed += took + 1
    keys = sorted(need)
    got = target.of([(seqs[n].tokens[:c], need[(n, c)]) for n, c in keys], sampling)
    probs = dict(zip(keys, got, strict=True))
    out: dict[int, OfflineAcceptance] = {}
    for k, walk in walks.items():
        per_pos = [0.0] * k
        drafted = 0
        for n, ctx, m in walk:
            run = 1.0
            for j, pj in enumerate(probs[(n, ctx)][:m]):
                run *= pj
                per_pos[j] += run
            drafted += m
        rounds = len(walk)
        rates = tuple(c / rounds if rounds else 0.0 for c in per_pos)
        out[k] = OfflineAcceptance(k, rates, rounds, drafted, round(sum(per_pos)))
    return out
