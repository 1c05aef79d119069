"""Lossless under sampling: is a candidate's output distribution the baseline's?

Why a distribution test: under temperature or top-p two lossless engines give different
strings, so greedy agreement cannot judge a sampled workload. Speculative decoding is
lossless when every output token is distributed as the target alone would sample it; a
sampler that accepts drafts for another reason (vLLM's ``rejection_sample_method:
synthetic`` accepts at fixed rates, whatever the target's probabilities) shifts that
distribution towards the draft's choices.

The check: for each of a few prompts, ``samples_per_prompt`` independent continuations of
``sampled_tokens`` tokens from the baseline (stored once per job) and from the candidate,
each request seeded so the job reads the same samples again. The statistic is the total
variation distance between the two sets' token frequencies at every position, summed over
positions and prompts; its p-value comes from permuting whole continuations between the two
sets within each prompt. A permutation test is exact when the two sets come from one
distribution: the chance of a false alarm (a lossless engine flagged) is at most ``alpha``,
whatever the vocabulary, the number of prompts or how positions depend on each other. Its
power grows with the samples; a difference smaller than the sampling noise of
``samples_per_prompt`` continuations passes unseen (numerics of a verify pass are such a
difference, as the greedy check allows for them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["PERMUTATIONS", "Samples", "distribution_p_value", "sample_seed"]

# One prompt's continuations, each a list of token ids (None: the prompt's request failed).
Samples = list[list[list[int]] | None]

PERMUTATIONS = 1999  # the smallest p-value the test can give is 1 / (PERMUTATIONS + 1)

# Seeds of the check's requests: the baseline's and a candidate's sets never share one, so
# the two are independent draws (a shared seed would couple them and hide a difference).
_BASELINE_SEEDS = 1_000_000
_CANDIDATE_SEEDS = 2_000_000


def sample_seed(prompt_index: int, samples_per_prompt: int, *, baseline: bool) -> int:
    """The seed of prompt ``prompt_index``'s request; its ``n`` continuations take this seed
    plus their index (as vLLM seeds parallel samples)."""
    base = _BASELINE_SEEDS if baseline else _CANDIDATE_SEEDS
    return base + prompt_index * samples_per_prompt


def _codes(seqs: Sequence[Sequence[int]], length: int) -> np.ndarray:
    """(n, length) array of column ids: one column per (position, token) seen at it."""
    arr = np.array([list(s[:length]) for s in seqs], dtype=np.int64)
    _, inv = np.unique(arr + (np.arange(length, dtype=np.int64) << 40), return_inverse=True)
    return inv.reshape(arr.shape)


def _tv(codes: np.ndarray, first: np.ndarray, columns: int) -> float:
    """Sum over positions of the total variation distance between the rows ``first``
    marks and the others."""
    a = np.bincount(codes[first].ravel(), minlength=columns) / max(1, int(first.sum()))
    b = np.bincount(codes[~first].ravel(), minlength=columns) / max(1, int((~first).sum()))
    return 0.5 * float(np.abs(a - b).sum())


def distribution_p_value(
    reference: Samples, candidate: Samples, *, permutations: int = PERMUTATIONS, seed: int = 0
) -> float | None:
    """p-value of "the candidate samples from the baseline's distribution" (small: it does
    not). Prompts are compared over the positions every continuation of both sets reached;
    a prompt missing on either side is left out. None when nothing can be compared (fewer
    than two continuations on a side)."""
    groups: list[tuple[np.ndarray, np.ndarray, int]] = []
    for ref, cand in zip(reference, candidate, strict=False):
        if not ref or not cand or len(ref) < 2 or len(cand) < 2:
            continue
        length = min(len(s) for s in (*ref, *cand))
        if length == 0:
            continue
        codes = _codes([*ref, *cand], length)
        first = np.zeros(len(ref) + len(cand), dtype=bool)
        first[: len(ref)] = True
        groups.append((codes, first, int(codes.max()) + 1))
    if not groups:
        return None
    observed = sum(_tv(c, f, n) for c, f, n in groups)
    rng = np.random.default_rng(seed)
    at_least = 0
    for _ in range(permutations):
        t = sum(_tv(c, rng.permutation(f), n) for c, f, n in groups)
        at_least += t >= observed - 1e-12
    return (1 + at_least) / (1 + permutations)
