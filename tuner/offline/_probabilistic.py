"""Acceptance of a draft model that samples its guesses (``draft_sample_method:
probabilistic``) under sampled traffic, priced from the baseline's own sampled outputs.

Why this expectation: vLLM's probabilistic drafting draws guess x from the draft's
distribution q (its logits over the request's temperature alone: top-k, top-p and min-p are
not applied to the draft) and accepts it with probability min(1, p(x)/q(x)), p the target's
sampling distribution. So a position is accepted with probability
beta = E_q[min(1, p/q)] = sum_x min(p(x), q(x)), and position j of a round with the product
of beta over positions 1..j. The committed tokens are a draw of p (the sampler is lossless),
so the baseline's own samples are the contexts; inside a round an accepted guess is a draw
of min(p, q) rather than p: the one approximation (Leviathan et al.'s expected acceptance),
whose size the measured error states. One teacher-forced forward of target and draft per
sequence gives beta at every position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuner.offline._model import load_causal_lm, row_logits
from tuner.offline._rounds import OfflineAcceptance, TokenSequence
from tuner.offline._sampled import TargetProbs, summarize

__all__ = ["overlaps", "price_probabilistic"]


def overlaps(
    draft_path: str,
    seqs: Sequence[TokenSequence],
    target: TargetProbs,
    sampling: Mapping[str, Any],
    device: str = "cpu",
) -> list[list[float]]:
    """Per sequence, sum_x min(p_t(x), q_t(x)) after every prefix t of its tokens."""
    draft = load_causal_lm(draft_path, device)
    t = max(float(sampling.get("temperature") or 0.0), 1e-5)
    out: list[list[float]] = []
    for s in seqs:
        p = target.along(s.tokens, sampling)
        q = (row_logits(draft, [s.tokens], device)[0].float() / t).softmax(-1)
        v = min(p.shape[-1], q.shape[-1])  # a padded embedding's extra rows are never drawn
        out.append(p[:, :v].minimum(q[:, :v]).sum(-1).tolist())
    return out


def price_probabilistic(
    seqs: Sequence[TokenSequence], depth: int, max_tokens: int, betas: Sequence[Sequence[float]]
) -> dict[int, OfflineAcceptance]:
    """Expected acceptance at every depth 1..``depth``, with standard errors over the
    sequences: rounds walk each sequence by their expected advance (1 + expected accepted),
    every round drafting ``k`` guesses (a draft always drafts its depth)."""
    out: dict[int, OfflineAcceptance] = {}
    for k in range(1, depth + 1):
        units: list[list[float]] = []
        for n, s in enumerate(seqs):
            u = [0.0, 0.0] + [0.0] * k
            p = len(s.prompt)
            limit = min(s.max_tokens or max_tokens, len(s.output))
            committed = 1.0  # the prefill's token
            while committed < limit:
                ctx = p + int(committed)
                b = betas[n][ctx - 1 : ctx - 1 + k]
                if not b:
                    break
                run, expected = 1.0, 0.0
                for j, bj in enumerate(b):
                    run *= bj
                    u[2 + j] += run
                    expected += run
                u[0] += 1
                u[1] += len(b)
                committed += 1.0 + expected
            if u[0]:
                units.append(u)
        out[k] = summarize(k, units)
    return out
