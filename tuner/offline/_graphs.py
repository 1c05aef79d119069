"""The graphs of vLLM 0.32's EAGLE, EAGLE-3 and MiMo MTP heads, in plain torch.

Why mirrored rather than imported: vLLM's modules need its forward context, attention
backends and a worker; offline pricing runs beside a finished baseline with only torch and
the checkpoints. Each graph is written from vLLM's own model file (named on each class)
and the residual convention of its fused ``RMSNorm(x, residual)``. Attention is passed in
(``Attend``), so the same graph runs as one teacher-forced pass over a whole sequence or as
a drafting step of many rounds at once. What a graph does not mirror is refused with the
reason (``HeadUnsupported``), never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Attend", "Head", "HeadUnsupported", "load_head"]

# attend(layer index, q [B, H, T, d], k and v [B, KV, T, d]) -> [B, H, T, d]
Attend = Callable[[int, Any, Any, Any], Any]


class HeadUnsupported(ValueError):
    """A head (or an option of one) whose graph SpecTune does not mirror."""


def _weights(path: Path) -> dict[str, Any]:
    import torch

    files = sorted(path.glob("*.safetensors"))
    w: dict[str, Any] = {}
    if files:
        from safetensors.torch import load_file

        for f in files:
            w.update(load_file(str(f)))
    elif (path / "pytorch_model.bin").is_file():
        w = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise OSError(f"no safetensors or pytorch_model.bin in {path}")
    return {k: v.float() if v.is_floating_point() else v for k, v in w.items()}


def _rms(x, w, eps: float):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope_theta(cfg: dict[str, Any]) -> float:
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    kind = rp.get("rope_type") or rp.get("type") or "default"
    if kind != "default":
        raise HeadUnsupported(f"rope type {kind!r} (only plain rotary embeddings are mirrored)")
    return float(rp.get("rope_theta") or cfg.get("rope_theta") or 10000.0)


_MLP = ("gate", "up", "down")


class _Layer:
    """One Llama/Qwen2 decoder layer's weights (``prefix`` + self_attn/mlp/norms)."""

    def __init__(self, w: dict[str, Any], prefix: str, cfg: dict[str, Any]) -> None:
        def get(name: str, required: bool = True):
            t = w.get(f"{prefix}.{name}")
            if t is None and required:
                raise HeadUnsupported(f"weight {prefix}.{name} missing")
            return t

        a = "self_attn"
        self.q, self.k, self.v = (get(f"{a}.{n}_proj.weight") for n in "qkv")
        self.qb, self.kb, self.vb = (get(f"{a}.{n}_proj.bias", False) for n in "qkv")
        self.o = get(f"{a}.o_proj.weight")
        self.gate, self.up, self.down = (get(f"mlp.{n}_proj.weight") for n in _MLP)
        self.in_norm = get("input_layernorm.weight", False)
        self.post_norm = get("post_attention_layernorm.weight")
        self.heads = int(cfg["num_attention_heads"])
        self.kv_heads = int(cfg.get("num_key_value_heads") or self.heads)
        self.head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // self.heads)
        self.theta = _rope_theta(cfg)
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        if cfg.get("hidden_act", "silu") != "silu":
            raise HeadUnsupported(f"activation {cfg.get('hidden_act')!r} (only silu)")

    def _rope(self, x, pos):
        import torch

        d = x.shape[-1]
        inv = 1.0 / (self.theta ** (torch.arange(0, d, 2, device=x.device).float() / d))
        f = pos[..., None].float() * inv  # [B, T, d/2]
        emb = torch.cat([f, f], -1)[:, None]  # [B, 1, T, d]
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()

    def attention(self, x, pos, attend: Attend, index: int):
        b, t, _ = x.shape

        def proj(wt, bias, n):
            y = x @ wt.T
            if bias is not None:
                y = y + bias
            return y.view(b, t, n, self.head_dim).transpose(1, 2)

        q = self._rope(proj(self.q, self.qb, self.heads), pos)
        k = self._rope(proj(self.k, self.kb, self.kv_heads), pos)
        v = proj(self.v, self.vb, self.kv_heads)
        o = attend(index, q, k, v)
        return o.transpose(1, 2).reshape(b, t, self.heads * self.head_dim) @ self.o.T

    def mlp(self, x):
        import torch.nn.functional as F

        return (F.silu(x @ self.gate.T) * (x @ self.up.T)) @ self.down.T

    def block(self, x, residual, pos, attend: Attend, index: int):
        """vLLM's decoder layer: (hidden, residual) in and out, fused add-norms."""
        if residual is None:
            residual = x
            h = x if self.in_norm is None else _rms(x, self.in_norm, self.eps)
        else:
            residual = x + residual
            h = _rms(residual, self.in_norm, self.eps)
        residual = self.attention(h, pos, attend, index) + residual
        return self.mlp(_rms(residual, self.post_norm, self.eps)), residual


class Head:
    """A head's drafting step: (embedding of the token after, fed hidden) -> (hidden fed
    to the next step, logits over the target's vocabulary)."""

    feature: str | tuple[int, ...] = "normed"  # what it reads from the target
    layers: list[_Layer]
    embed: Any
    lm_head: Any

    def combine(self, feats):
        """Target features -> the hidden its first step reads."""
        return feats

    def step(self, emb, hidden, pos, attend: Attend):  # pragma: no cover - abstract
        raise NotImplementedError

    def to_target(self, draft_ids):
        return draft_ids


class Eagle(Head):
    """vLLM ``llama_eagle``: fc over [embed(t+1), target's final normed hidden(t)], decoder
    layers (the first without input norm), no final norm; the pre-norm sum is fed back."""

    def __init__(self, w, cfg, target_embed, target_lm_head) -> None:
        self.fc = w["fc.weight"]
        n = int(cfg.get("num_hidden_layers", 1))
        self.layers = [_Layer(w, f"layers.{i}", cfg) for i in range(n)]
        self.layers[0].in_norm = None
        self.embed = w.get("embed_tokens.weight", target_embed)
        self.lm_head = w.get("lm_head.weight", target_lm_head)

    def step(self, emb, hidden, pos, attend):
        import torch

        x, r = torch.cat([emb, hidden], -1) @ self.fc.T, None
        for i, layer in enumerate(self.layers):
            x, r = layer.block(x, r, pos, attend, i)
        out = x + r
        return out, out @ self.lm_head.T


class Eagle3(Head):
    """vLLM ``llama_eagle3``: fc over auxiliary residual streams, a first layer over
    [norm(embed), norm(hidden)], final norm, its own lm_head over a draft vocabulary mapped
    to the target's by ``d2t``; the pre-norm sum is fed back."""

    def __init__(self, w, cfg, target_embed, target_lm_head, target_layers: int) -> None:
        import torch

        eagle = cfg.get("eagle_config") or {}
        if eagle.get("use_aux_hidden_state", True) is False:
            raise HeadUnsupported("eagle_config.use_aux_hidden_state false")
        for flag in ("norm_before_fc", "fc_norm", "norm_output"):
            if eagle.get(flag) or cfg.get(flag):
                raise HeadUnsupported(f"option {flag}")
        ids = eagle.get("eagle_aux_hidden_state_layer_ids")
        L = target_layers
        self.feature = tuple(int(i) for i in (ids or (2, L // 2, L - 3)))
        if not all(0 <= i < L for i in self.feature):
            raise HeadUnsupported(f"reads layers the target lacks ({L} layers)")
        self.fc = w["fc.weight"]
        self.before_residual = bool(cfg.get("norm_before_residual"))
        first = "midlayer" if "midlayer.hidden_norm.weight" in w else "layers.0"
        n = int(cfg.get("num_hidden_layers", 1))
        self.layers = [_Layer(w, first if i == 0 else f"layers.{i}", cfg) for i in range(n)]
        self.hidden_norm = w[f"{first}.hidden_norm.weight"]
        self.norm = w["norm.weight"]
        self.eps = self.layers[0].eps
        self.embed = w.get("embed_tokens.weight", target_embed)
        self.lm_head = w["lm_head.weight"]
        d2t = w.get("d2t")
        vocab = target_lm_head.shape[0]
        self.d2t = (
            torch.arange(self.lm_head.shape[0]) + d2t.long()
            if d2t is not None
            else torch.arange(vocab)
        )

    def combine(self, feats):
        return feats @ self.fc.T

    def step(self, emb, hidden, pos, attend):
        import torch

        first = self.layers[0]
        e = _rms(emb, first.in_norm, self.eps)
        hn = _rms(hidden, self.hidden_norm, self.eps)
        r = hn if self.before_residual else hidden
        x = first.attention(torch.cat([e, hn], -1), pos, attend, 0)
        r = x + r
        x = first.mlp(_rms(r, first.post_norm, self.eps))
        for i, layer in enumerate(self.layers[1:], start=1):
            x, r = layer.block(x, r, pos, attend, i)
        prenorm = x + r
        return prenorm, _rms(prenorm, self.norm, self.eps) @ self.lm_head.T

    def to_target(self, draft_ids):
        return self.d2t.to(draft_ids.device)[draft_ids]


class MimoMtp(Head):
    """vLLM ``mimo_mtp`` layer 0 (reused at every step, as vLLM does): final_norm of a Qwen2
    layer over input_proj([norm(target's pre-norm hidden), norm(embed)]); the embedding is
    zero at position 0; the normed output is fed back."""

    feature = "prenorm"
    P = "model.mtp_layers.0"

    def __init__(self, w, cfg) -> None:
        P = self.P
        self.tok_norm = w[f"{P}.token_layernorm.weight"]
        self.hid_norm = w[f"{P}.hidden_layernorm.weight"]
        self.final_norm = w[f"{P}.final_layernorm.weight"]
        self.proj = w[f"{P}.input_proj.weight"]
        self.layers = [_Layer(w, P, cfg)]
        self.eps = self.layers[0].eps
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)

    def step(self, emb, hidden, pos, attend):
        import torch

        emb = torch.where(pos[..., None] == 0, 0.0, emb)
        h, e = _rms(hidden, self.hid_norm, self.eps), _rms(emb, self.tok_norm, self.eps)
        x = torch.cat([h, e], -1) @ self.proj.T
        x, r = self.layers[0].block(x, None, pos, attend, 0)
        out = _rms(x + r, self.final_norm, self.eps)
        return out, out @ self.lm_head.T


def _strip(w: dict[str, Any]) -> dict[str, Any]:
    """Checkpoints name EAGLE weights with or without the ``model.`` prefix."""
    return {k.removeprefix("model."): v for k, v in w.items()}


def load_head(
    method: str, path: str | Path, target_embed, target_lm_head, target_layers: int
) -> Head:
    """The head of ``method`` at ``path`` (for MTP: the target checkpoint with its layers).
    Raises HeadUnsupported (with the reason) for what is not mirrored, OSError when the
    checkpoint does not read."""
    path = Path(path)
    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise OSError(f"{path}/config.json does not read ({e})") from e
    if method in ("eagle", "eagle3") and cfg.get("model_type", "llama") != "llama":
        raise HeadUnsupported(f"model_type {cfg.get('model_type')!r} (Llama-style heads only)")
    try:
        if method == "eagle":
            return Eagle(_strip(_weights(path)), cfg, target_embed, target_lm_head)
        if method == "eagle3":
            return Eagle3(_strip(_weights(path)), cfg, target_embed, target_lm_head, target_layers)
        if method == "mtp":
            if "MiMoForCausalLM" not in (cfg.get("architectures") or []):
                raise HeadUnsupported(
                    f"MTP of {', '.join(cfg.get('architectures') or ['?'])} (MiMo's only)"
                )
            if int(cfg.get("num_nextn_predict_layers") or 0) < 1:
                raise HeadUnsupported("no MTP layers (num_nextn_predict_layers)")
            return MimoMtp(_weights(path), cfg)
    except KeyError as e:
        raise HeadUnsupported(f"weight {e.args[0]} missing") from None
    raise HeadUnsupported(f"method {method!r}")
