"""Pre-flight of heads that read one target's hidden states without an EAGLE layout.

Medusa heads and MLP speculators: the i-th head predicts position i from the last hidden
state, so their width and vocabulary must be the target's and they must have at least as many
heads as the depth asks for. DFlash and DSpark drafts: a block drafted in one forward from the
target layers their config names (``target_layer_ids``, in ``dflash_config`` or beside it), so
those layers must exist in the target and the vocabulary must be its."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["HEAD_PROBLEMS", "STACKED_HEADS", "block_draft_problem", "stacked_head_problem"]

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


def block_draft_problem(
    tcfg: dict[str, Any], hcfg: dict[str, Any], spec: dict[str, Any]
) -> str | None:
    """Why the DFlash or DSpark draft in ``hcfg`` cannot serve the target ``tcfg``."""
    method = str(spec["method"])
    field = f"methods.{method}.heads"
    nested = hcfg.get("dflash_config") if isinstance(hcfg.get("dflash_config"), dict) else {}
    ids = nested.get("target_layer_ids") or hcfg.get("target_layer_ids")
    ids = ids or hcfg.get("dspark_target_layer_ids")
    layers = tcfg.get("num_hidden_layers")
    if isinstance(ids, list) and isinstance(layers, int):
        beyond = [i for i in ids if not isinstance(i, int) or not 0 <= i < layers]
        if beyond:
            return (
                f"{field}: it reads target layers {beyond}, the target has {layers} "
                "(0.." + str(layers - 1) + "); it belongs to another target"
            )
    vocab, t_vocab = hcfg.get("vocab_size"), tcfg.get("vocab_size")
    if isinstance(vocab, int) and isinstance(t_vocab, int) and vocab != t_vocab:
        return f"{field}: draft vocab_size {vocab} != target {t_vocab}"
    return None


Problem = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], str | None]
# method -> its pre-flight of a head checkpoint's config against the target's
HEAD_PROBLEMS: dict[str, Problem] = {
    "medusa": stacked_head_problem,
    "mlp_speculator": stacked_head_problem,
    "dflash": block_draft_problem,
    "dspark": block_draft_problem,
}
