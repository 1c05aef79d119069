"""EAGLE, EAGLE-3, MTP and Medusa heads' greedy guesses along the baseline's sequences.

Why this prices a head as vLLM runs it: vLLM's proposer first runs the head over the
verified positions with the target's hidden states (so the head's KV cache for the context
holds those), then drafts step by step, feeding back its own hidden state and guessed
token, attending to the context and its own earlier steps. Position j of a round counts only
when guesses 1..j-1 were right, and then the fed tokens were the true ones. So one
teacher-forced forward of the target gives the features each head reads; one forward of the
head over them gives every round's first guess and the context's KV; steps 2..K then run
for every round at once, each attending to the context up to the round's start plus the
round's own steps. Float32 here against the engine's dtype: near-ties can break the other
way, and the measured error says how often.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tuner.offline._graphs import Head, HeadUnsupported, load_head
from tuner.offline._medusa import MedusaHeads
from tuner.offline._model import load_causal_lm
from tuner.offline._rounds import TokenSequence

__all__ = ["HEAD_METHODS", "HeadGuesses", "head_guesses"]

HEAD_METHODS = ("eagle", "eagle3", "mtp", "medusa")
_SCORES = 1 << 24  # attention scores held at once (rounds x heads x context)


class _Target:
    """The target run by transformers, returning what the heads read: the final normed
    hidden, the last layer's pre-norm output, or residual streams entering given layers."""

    def __init__(self, path: str, device: str) -> None:
        m = load_causal_lm(path, device, quiet=True)  # an MTP checkpoint's extra layers
        body = m.get_decoder()
        if not hasattr(body, "layers") or not hasattr(body, "norm"):
            raise HeadUnsupported(f"target {type(m).__name__}: no decoder layers and norm")
        self.body, self.device = body, device
        self.embed = m.get_input_embeddings().weight
        self.lm_head = m.get_output_embeddings().weight
        self.num_layers = len(body.layers)

    def features(self, ids: Sequence[int], needs: set[Any]) -> dict[Any, Any]:
        import torch

        outs: list[Any] = []

        def keep(_mod, _args, out):
            outs.append(out[0] if isinstance(out, tuple) else out)

        hooks = [self.body.embed_tokens.register_forward_hook(keep)]
        hooks += [layer.register_forward_hook(keep) for layer in self.body.layers]
        try:
            self.body(input_ids=torch.tensor([list(ids)], device=self.device))
        finally:
            for h in hooks:
                h.remove()
        streams = outs  # streams[i] enters layer i; streams[-1] leaves the last layer
        got: dict[Any, Any] = {}
        for need in needs:
            if need == "normed":
                got[need] = self.body.norm(streams[-1])
            elif need == "prenorm":
                got[need] = streams[-1]
            else:
                got[need] = torch.cat([streams[i] for i in need], -1)
        return got


def _expand(x, heads: int):
    return x.repeat_interleave(heads // x.shape[1], dim=1) if x.shape[1] != heads else x


def _chain_attend(q, base, chain, q0):
    """Each round's query over the context's KV up to its start plus its own steps."""
    import torch

    kb, vb = (_expand(t, q.shape[1])[0] for t in base)  # [H, T, d]
    kc = _expand(torch.cat([k for k, _ in chain], 2), q.shape[1])  # [R, H, c, d]
    vc = _expand(torch.cat([v for _, v in chain], 2), q.shape[1])
    qs = q[:, :, 0] / q.shape[-1] ** 0.5  # [R, H, d]
    sb = torch.einsum("rhd,htd->rht", qs, kb)
    sb = sb.masked_fill(torch.arange(kb.shape[1], device=q.device) > q0[:, None, None], -torch.inf)
    w = torch.softmax(torch.cat([sb, torch.einsum("rhd,rhcd->rhc", qs, kc)], -1), -1)
    t = kb.shape[1]
    o = torch.einsum("rht,htd->rhd", w[..., :t], vb)
    return (o + torch.einsum("rhc,rhcd->rhd", w[..., t:], vc))[:, :, None]


def _guesses(head: Head, ids: Sequence[int], feats, depth: int, first: int, device: str):
    """[T-1, depth] target ids: row q0 is the round drafting after token q0 + 1."""
    import torch
    import torch.nn.functional as F

    tok = torch.tensor(list(ids), device=device)
    T = len(ids) - 1  # head positions: (token t+1, feature t) for t < T
    base: dict[int, tuple[Any, Any]] = {}

    def causal(i, q, k, v):
        base[i] = (k, v)
        return F.scaled_dot_product_attention(
            q, _expand(k, q.shape[1]), _expand(v, q.shape[1]), is_causal=True
        )

    pos = torch.arange(T, device=device)[None]
    hid, logits = head.step(head.embed[tok[1:]][None], head.combine(feats[:, :T]), pos, causal)
    out = torch.full((T, depth), -1, dtype=torch.long, device=device)
    out[:, 0] = head.to_target(logits[0].argmax(-1))
    heads = max(layer.heads for layer in head.layers)
    rounds = torch.arange(max(first, 0), T, device=device)
    for chunk in rounds.split(max(1, _SCORES // (heads * T))):
        h = hid[0, chunk][:, None]
        chain: dict[int, list[tuple[Any, Any]]] = {}
        for j in range(2, depth + 1):

            def attend(i, q, k, v, chunk=chunk, chain=chain):
                chain.setdefault(i, []).append((k, v))
                return _chain_attend(q, base[i], chain[i], chunk)

            e = head.embed[tok[(chunk + j).clamp(max=T)]][:, None]
            h, lg = head.step(e, h, (chunk + j - 1)[:, None], attend)
            out[chunk, j - 1] = head.to_target(lg[:, 0].argmax(-1))
    return out.cpu()


class HeadGuesses:
    """A head's guesses for every round of every sequence (computed once, up to a depth)."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = [r.tolist() for r in rows]

    def propose(self, n: int, full: tuple[int, ...], ctx: int, k: int) -> list[int]:
        """The round after ``ctx`` tokens: the head drafts from feature ctx-2 and token ctx-1."""
        rows = self.rows[n]
        q0 = ctx - 2
        return [] if not 0 <= q0 < len(rows) else rows[q0][:k]


def head_guesses(
    heads: Mapping[str, tuple[str, str]],
    target: str | Path,
    seqs: Sequence[TokenSequence],
    depth: int,
    device: str = "cpu",
) -> tuple[dict[str, HeadGuesses], dict[str, str]]:
    """``heads``: key -> (method, checkpoint; for MTP the target itself). One forward of
    the target per sequence serves every head. Returns the guesses and, for each head that
    cannot be priced, the reason."""
    import torch

    reasons: dict[str, str] = {}
    try:
        tgt = _Target(str(target), device)
    # A target transformers cannot build or find, or without the layers the heads read.
    except (OSError, ValueError, RuntimeError, KeyError, ImportError) as e:
        return {}, {k: f"target {target} did not load for the heads ({e})" for k in heads}
    loaded: dict[str, Head | MedusaHeads] = {}
    for key, (method, path) in heads.items():
        try:
            with torch.inference_mode():
                loaded[key] = (
                    MedusaHeads(path)
                    if method == "medusa"
                    else load_head(method, path, tgt.embed, tgt.lm_head, tgt.num_layers)
                )
        except HeadUnsupported as e:
            reasons[key] = f"{method} head {path}: not mirrored offline: {e}"
        except (OSError, RuntimeError, ValueError) as e:
            reasons[key] = f"{method} head {path} did not load ({e})"
    rows: dict[str, list[Any]] = {k: [] for k in loaded}
    needs = {h.feature for h in loaded.values()}
    with torch.inference_mode():
        for s in seqs:
            feats = tgt.features(s.tokens, needs)
            for key, head in list(loaded.items()):
                first = len(s.prompt) - 1
                try:
                    if isinstance(head, MedusaHeads):
                        rows[key].append(head.guesses(feats[head.feature][0, :-1], depth).cpu())
                    else:
                        rows[key].append(
                            _guesses(head, s.tokens, feats[head.feature], depth, first, device)
                        )
                # Shapes that do not fit the target (a head of another model): unpriced.
                except (RuntimeError, IndexError) as e:
                    method, path = heads[key]
                    reasons[key] = f"{method} head {path} does not fit the target ({e})"
                    del loaded[key]
    return {k: HeadGuesses(rows[k]) for k in loaded}, reasons
