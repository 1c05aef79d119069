"""vLLM's n-gram (prompt lookup) proposer, as a pure function of the tokens so far.

vLLM 0.32 (``vllm/v1/spec_decode/ngram_proposer.py``) looks for the longest n in
[prompt_lookup_min, prompt_lookup_max] whose last n tokens occur earlier in the request
(prompt and output), takes the earliest such occurrence, and drafts up to k tokens that
follow it (fewer when the context ends first; none without a match). The same rule here
(a search per length instead of its KMP pass; ``tests/offline`` checks the two agree).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ngram_propose"]


def ngram_propose(
    tokens: Sequence[int], k: int, min_n: int, max_n: int, max_model_len: int | None = None
) -> list[int]:
    """The draft vLLM's n-gram proposer makes after ``tokens`` (prompt + output so far)."""
    total = len(tokens)
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    if total < min_n or k <= 0:
        return []
    arr = np.asarray(tokens)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        if n < 1:
            break
        suffix = arr[total - n :]
        # Candidate starts j (earlier than the suffix itself) with arr[j:j+n] == suffix.
        windows = np.lib.stride_tricks.sliding_window_view(arr[: total - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[0]) + n
            return [int(t) for t in arr[start : start + min(k, total - start)]]
    return []
