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
(``draft_sample_method: probabilistic``) the guess is itself a draw, accepted with
probability min(1, p/q): ``_probabilistic`` prices that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuner.offline._model import load_causal_lm, row_logits
from tuner.offline._rounds import OfflineAcceptance, Proposer, TokenSequence

__all__ = [
    "TargetProbs",
    "draft_chains",
    "price_sampled",
    "ratio_se",
    "sampling_probs",
    "summarize",
]

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


class TargetProbs:
    """The target's sampling probabilities of each round's guesses."""

    def __init__(self, path: str, device: str = "cpu") -> None:
        self.model, self.device = load_causal_lm(path, device), device

    def of(
        self, rounds: Sequence[tuple[tuple[int, ...], Sequence[int]]], sampling: Mapping[str, Any]
    ) -> list[list[float]]:
        """``rounds``: (context ids, guesses); p(g_j | context, g_<j) for each guess."""
        out: list[list[float]] = []
        for lo in range(0, len(rounds), _ROWS):
            part = rounds[lo : lo + _ROWS]
            logits = row_logits(self.model, [tuple(c) + tuple(g) for c, g in part], self.device)
            for i, (ctx, guess) in enumerate(part):
                if not guess:
                    out.append([])
                    continue
                at = logits[i, len(ctx) - 1 : len(ctx) - 1 + len(guess)]
                probs = sampling_probs(at, sampling)
                out.append([float(probs[j, int(t)]) for j, t in enumerate(guess)])
        return out

    def along(self, tokens: Sequence[int], sampling: Mapping[str, Any]) -> Any:
        """The sampling probabilities after every prefix of ``tokens`` (row t: the next
        token after tokens[: t + 1]); one forward."""
        return sampling_probs(row_logits(self.model, [tokens], self.device)[0], sampling)


def draft_chains(
    path: str, seqs: Sequence[TokenSequence], depth: int, max_tokens: int, device: str = "cpu"
) -> Proposer:
    """A draft model's own greedy chain from every round start of every sequence (``depth``
    forwards per batch of starts): under sampling a later guess follows the draft's earlier
    guesses, not the sample, since a guess the sample did not take may still be accepted."""
    model = load_causal_lm(path, device)
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
                logits = row_logits(model, rows, device)
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
    docstring), with its standard error over them; the counts are expectations rounded to
    whole tokens."""
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
        # Per sequence: rounds, drafted tokens, expected accepted at each position.
        units: dict[int, list[float]] = {}
        for n, ctx, m in walk:
            u = units.setdefault(n, [0.0, 0.0] + [0.0] * k)
            u[0] += 1
            u[1] += m
            run = 1.0
            for j, pj in enumerate(probs[(n, ctx)][:m]):
                run *= pj
                u[2 + j] += run
        out[k] = summarize(k, list(units.values()))
    return out


def summarize(k: int, units: Sequence[Sequence[float]]) -> OfflineAcceptance:
    """Expected acceptance at depth ``k`` from per-sequence sums ``[rounds, drafted tokens,
    expected accepted at position 1..k]``, with standard errors over the sequences."""
    rounds = sum(u[0] for u in units)
    drafted = sum(u[1] for u in units)
    per_pos = [sum(u[2 + j] for u in units) for j in range(k)]
    rates = tuple(c / rounds if rounds else 0.0 for c in per_pos)
    rate_se = ratio_se([sum(u[2:]) for u in units], [u[1] for u in units])
    pos_se = tuple(ratio_se([u[2 + j] for u in units], [u[0] for u in units]) for j in range(k))
    return OfflineAcceptance(
        k, rates, int(rounds), int(drafted), round(sum(per_pos)), (), rate_se, pos_se
    )


def ratio_se(num: Sequence[float], den: Sequence[float]) -> float:
    """Standard error of sum(num) / sum(den) over independent units (the delta method:
    each unit a sampled sequence, whose rounds are not independent of each other)."""
    n, total = len(num), sum(den)
    if n < 2 or total <= 0:
        return 0.0
    r = sum(num) / total
    resid = sum((a - r * d) ** 2 for a, d in zip(num, den, strict=True))
    return (n / (n - 1) * resid) ** 0.5 / total
