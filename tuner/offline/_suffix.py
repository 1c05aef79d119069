"""vLLM's suffix-decoding proposer replayed over the baseline's sequences.

vLLM 0.32 (``vllm/v1/spec_decode/suffix_decoding.py``) keeps one Arctic Inference
``SuffixDecodingCache``: a request's first decode step starts it (its prompt becomes the
request's own suffix tree), every step appends the tokens it committed (to that tree and, with
``max_cached_requests`` not 0, to the global tree of responses every request drafts from),
then drafts from the last ``max_tree_depth`` tokens, at most ``min(k, max_model_len - n - 1)``
of them, fewer as ``max_spec_factor`` and ``min_token_prob`` say; a finished request is
stopped (its response stays in the global tree until evicted, first in first out).

The replay makes the same calls on the same cache, one sequence after another: exact for the
per-request trees (``max_cached_requests: 0``, as exact as the n-gram replay). The global tree
depends on which responses came before, so its price is for the baseline's requests in
workload order, each once, at concurrency 1. An engine that serves a workload's prompts again
(warm-up, passes of a repeat) drafts a repeat from its own earlier response, which this replay
does not: there the engine's acceptance is the higher, and ``GLOBAL_TREE_NOTE`` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["DEFAULTS", "GLOBAL_TREE_NOTE", "SuffixReplay"]

# vLLM 0.32's SpeculativeConfig defaults (what a knob the space leaves out means).
DEFAULTS = {
    "max_tree_depth": 24,
    "max_cached_requests": 10000,
    "max_spec_factor": 1.0,
    "min_token_prob": 0.1,
}

GLOBAL_TREE_NOTE = (
    "suffix decoding's global tree priced over the baseline's requests in workload order, "
    "each once: an engine that serves the same prompts again (warm-up, repeated passes) "
    "drafts them from their own earlier responses and accepts more"
)


class SuffixReplay:
    """A fresh cache with one configuration's knobs; ``propose`` has the ``Proposer``
    signature of ``replay_rounds`` and must see the sequences in order, once."""

    def __init__(self, config: dict[str, Any], max_model_len: int | None = None) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        knobs = {k: config.get(k) if config.get(k) is not None else v for k, v in DEFAULTS.items()}
        self.depth = int(knobs["max_tree_depth"])
        self.factor = float(knobs["max_spec_factor"])
        self.min_prob = float(knobs["min_token_prob"])
        self.max_model_len = max_model_len
        self.cache = SuffixDecodingCache(
            max_tree_depth=self.depth, max_cached_requests=int(knobs["max_cached_requests"])
        )
        self._current: int | None = None
        self._seen = 0  # tokens of the current request the cache holds (prompt + output)

    def propose(self, n: int, full: Sequence[int], ctx: int, k: int) -> list[int]:
        previous = self._current
        if n != previous:
            # vLLM starts a request, drafts for it, then stops those not in the batch.
            prompt_len = ctx - 1  # the first round follows the prefill's one token
            self.cache.start_request(n, [int(t) for t in full[:prompt_len]])
            self._current, self._seen = n, prompt_len
        self.cache.add_active_response(n, [int(t) for t in full[self._seen : ctx]])
        self._seen = ctx
        limit = k if self.max_model_len is None else min(k, self.max_model_len - ctx - 1)
        draft: list[int] = []
        if limit > 0:
            got = self.cache.speculate(
                n,
                [int(t) for t in full[max(0, ctx - self.depth) : ctx]],
                max_spec_tokens=limit,
                max_spec_factor=self.factor,
                min_token_prob=self.min_prob,
            )
            draft = [int(t) for t in got.token_ids][:limit]
        if previous is not None and previous != n:
            self.cache.stop_request(previous)
        return draft
