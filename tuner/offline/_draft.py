"""A draft model's greedy guesses along the baseline's sequences: one teacher-forced forward.

Why one forward suffices: in a round starting after context t, the draft's j-th guess is its
argmax given the context and its own earlier guesses. Position j counts as accepted only
when every earlier guess equalled the target's token, and then the draft's inputs were the
target's tokens: its argmax at t+j of the forward over the true sequence. A guess after a
rejected one is rejected whatever it is. So the argmax of one forward over prompt + output
prices every round at every depth (vLLM's draft runs in the target's dtype; here float32,
so near-ties can break the other way: the measured error says how often).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tuner.offline._model import load_causal_lm
from tuner.offline._rounds import TokenSequence

__all__ = ["DraftGuesses"]


class DraftGuesses:
    """The draft's argmax at every position of every sequence (computed once)."""

    def __init__(self, draft_dir: str | Path, seqs: Sequence[TokenSequence], device: str = "cpu"):
        import torch

        model = load_causal_lm(str(draft_dir), device)
        self.argmax: list[list[int]] = []
        with torch.inference_mode():
            for s in seqs:
                ids = torch.tensor([s.tokens], device=device)
                logits = model(input_ids=ids).logits[0]
                self.argmax.append(logits.argmax(-1).tolist())

    def propose(self, n: int, full: tuple[int, ...], ctx: int, k: int) -> list[int]:
        """Guesses for the round after ``ctx`` tokens of sequence ``n``."""
        pred = self.argmax[n]
        return [pred[ctx - 1 + j] for j in range(k) if ctx - 1 + j < len(pred)]
