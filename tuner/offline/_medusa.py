"""vLLM 0.32's Medusa heads (``model_executor/models/medusa.py``) in plain torch.

Why a round needs no chain here: every head reads the same feature, the target's final
normed hidden state at the position that produced the round's latest token, and none reads
another head's guess. So one teacher-forced forward of the target gives every round's whole
draft at once: head i's argmax at position q is the (i + 1)-th guess of the round after
token q + 1 (rows as ``HeadGuesses`` reads them). The checkpoint layouts vLLM loads are read
the same way: ``medusa_heads.`` prefixes, FasterDecoding's ``{head}.{layer}.linear.*`` and
``{head}.{n}.weight``, a shared ``original_lm_head``, a ``token_map`` over a truncated
vocabulary.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tuner.offline._graphs import HeadUnsupported, _weights

__all__ = ["MedusaHeads"]

_OLD = re.compile(r"^(\d+)\.(\d+)\.(linear\.)?(.+)$")


def _remap(name: str) -> str:
    """vLLM's ``Medusa._remap_old_checkpoint_key``: bare numeric prefixes to its names."""
    name = name.replace("medusa_heads.", "")
    m = _OLD.match(name)
    if m is None:
        return name
    head, layer, linear, rest = m.groups()
    if linear:
        return f"blocks.{head}.layers.{layer}.{rest}"
    return f"lm_heads.{head}.{rest}"


class MedusaHeads:
    """Medusa heads as vLLM runs them: per head, residual blocks x + SiLU(W x [+ b]), then
    its lm_head (or the shared original one)."""

    feature = "normed"

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        try:
            cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise OSError(f"{path}/config.json does not read ({e})") from e
        # vLLM's MedusaConfig.from_pretrained: any key with "num" and "heads" or "layers".
        heads = next((v for k, v in cfg.items() if "num" in k and "heads" in k), None)
        layers = next((v for k, v in cfg.items() if "num" in k and "layers" in k), 1)
        if not isinstance(heads, int) or heads < 1:
            raise HeadUnsupported("no head count (num_heads) in its config")
        w = {_remap(k): v for k, v in _weights(path).items()}
        self.heads, self.layers = heads, int(layers)
        self.token_map = None
        vocab = int(cfg.get("vocab_size") or 0)
        truncated = int(cfg.get("truncated_vocab_size") or vocab)
        if truncated < vocab:
            if "token_map" not in w:
                raise HeadUnsupported("truncated_vocab_size without a token_map")
            self.token_map = w["token_map"].long()
        shared = cfg.get("original_lm_head")
        lm0 = w.get("lm_head.weight", w.get("lm_heads.0.weight"))
        try:
            self.blocks = [
                [
                    (w[f"blocks.{i}.layers.{j}.weight"], w.get(f"blocks.{i}.layers.{j}.bias"))
                    for j in range(self.layers)
                ]
                for i in range(heads)
            ]
            self.lm_heads = [lm0 if shared else w[f"lm_heads.{i}.weight"] for i in range(heads)]
        except KeyError as e:
            raise HeadUnsupported(f"weight {e.args[0]} missing") from None
        if any(lm is None for lm in self.lm_heads):
            raise HeadUnsupported("weight lm_heads.0.weight missing")
        if self.token_map is not None:  # vLLM keeps the map's rows of a full-vocabulary head
            n = len(self.token_map)
            self.lm_heads = [lm[self.token_map] if lm.shape[0] > n else lm for lm in self.lm_heads]

    def guesses(self, normed, depth: int):
        """[T, depth] target ids from the normed features [T, hidden]; -1 past the heads."""
        import torch
        import torch.nn.functional as F

        out = torch.full((normed.shape[0], depth), -1, dtype=torch.long, device=normed.device)
        for i in range(min(depth, self.heads)):
            x = normed
            for weight, bias in self.blocks[i]:
                x = x + F.silu(F.linear(x, weight, bias))
            ids = F.linear(x, self.lm_heads[i]).argmax(-1)
            out[:, i] = ids if self.token_map is None else self.token_map[ids]
        return out
