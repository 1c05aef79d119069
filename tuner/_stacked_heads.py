"""Pre-flight of Medusa heads and MLP speculators: one target's extra heads, the i-th
predicting position i from its last hidden state, so their width and vocabulary must be the
target's and they must have at least as many heads as the depth asks for."""

from __future__ import annotations

from typing import Any

__all__ = ["STACKED_HEADS", "stacked_head_problem"]

# method -> (config key of its head count, config key of the hidden width it reads)
STACKED_HEADS = {
    "medusa": ("num_heads", "hidden_size"),
    "mlp_speculator": ("n_predict", "emb_dim"),
}


def stacked_head_problem(
    tcfg: dict[str, Any], hcfg: dict[str, Any], spec: dict[str, Any]
) -> str | None:
    """Why the heads in ``hcfg`` cannot serve the target ``tcfg`` at ``spec``'s depth."""
    method = str(spec["method"])
    field = f"methods.{method}.heads"
    count_key, width_key = STACKED_HEADS[method]
    n, k = hcfg.get(count_key), int(spec.get("num_speculative_tokens") or 1)
    if isinstance(n, int) and k > n:
        return f"methods.{method}.num_speculative_tokens: {k} exceeds the checkpoint's {n} heads"
    width, t_width = hcfg.get(width_key), tcfg.get("hidden_size")
    if isinstance(width, int) and isinstance(t_width, int) and width != t_width:
        return (
            f"{field}: the heads read a hidden state of {width}, the target has {t_width}; "
            "they belong to another target"
        )
    vocab, t_vocab = hcfg.get("vocab_size"), tcfg.get("vocab_size")
    if isinstance(vocab, int) and isinstance(t_vocab, int) and vocab != t_vocab:
        return f"{field}: head vocab_size {vocab} != target {t_vocab}"
    return None
