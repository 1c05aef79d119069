"""One way to load a checkpoint for offline pricing and run it over padded rows.

Why float32 on the CPU: pricing reads argmaxes and probabilities, and the engine's own
dtype is not known here; float32 keeps near-ties rare, and the measured error says how
often they break the other way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["load_causal_lm", "row_logits"]


def load_causal_lm(path: str, device: str = "cpu", *, quiet: bool = False) -> Any:
    """A transformers causal LM in float32, in eval mode. ``quiet``: hide the warnings of
    weights the class does not use (an MTP checkpoint's extra layers are expected)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    was = logging.get_verbosity()
    if quiet:
        logging.set_verbosity_error()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    finally:
        logging.set_verbosity(was)
    return model.to(device).eval()


def row_logits(model: Any, rows: Sequence[Sequence[int]], device: str = "cpu") -> Any:
    """Logits at every position of each of the right-padded ``rows`` (one forward)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, device=device)
        mask[i, : len(r)] = 1
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask).logits
