"""Train the tiny target's EAGLE-1 head, EAGLE-3 head and MiMo-style MTP layer on this CPU.

Why: SpecTune claims eagle, eagle3 and mtp; each must run for real on the embedded default,
and a random-weight head accepts nothing. The EAGLE recipe: the head sees the target's own
features (hidden states) at position t and the token at t+1, and learns to predict what the
target predicts at t+1 (its next feature and token distribution). Features come from the
frozen target in ``models/tiny/target``, run here by a small functional forward that mirrors
vLLM's graph for each head exactly (checked against Hugging Face's logits at start).

Writes, next to the target (paths relative to ``--models``):

- ``eagle/``: EAGLE-1 head (vLLM ``method: eagle``): ``fc`` over cat(embed(t+1), h_t) with the
  target's *final normed* hidden state, one Llama layer without input norm, no final norm; the
  target's embeddings and lm_head are shared.
- ``eagle3/``: EAGLE-3 head (``method: eagle3``): ``fc`` over three auxiliary residual streams,
  a mid-layer over cat(norm(embed), norm(h)), final norm, its own lm_head over a 2,048-token
  draft vocabulary (the most frequent training tokens) with ``d2t``/``t2d`` maps.
- ``target-mtp/``: the *same* target weights as a ``MiMoForCausalLM`` (Qwen2 body, q/k/v biases
  zero, so it computes the tiny target's function) plus one trained MTP layer
  (``method: mtp``). Same tokenizer, same greedy outputs as the target up to numerics.
- ``heads_report.json``: losses, offline acceptance at each draft position, timings.

    python scripts/train_heads.py --models models/tiny
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_tiny_pair import corpus_files, lr_at, read_text, split_files  # noqa: E402

EAGLE3_AUX_LAYERS = [1, 2, 4]  # low, middle, high residual streams of the 5-layer target
DRAFT_VOCAB = 2048


# ---------------------------------------------------------------- functional building blocks


def rms(x, w, eps):
    import torch

    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)) * w


def rope(x, pos, theta: float):
    """Neox-style rotary embedding (Hugging Face Llama / vLLM is_neox_style=True)."""
    import torch

    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    f = pos[:, None].float() * inv[None, :]
    emb = torch.cat([f, f], -1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention(x, p, prefix, heads, head_dim, theta, bias=False):
    import torch.nn.functional as F

    b, t, _ = x.shape

    def proj(name):
        y = x @ p[f"{prefix}.{name}.weight"].T
        if bias:
            y = y + p[f"{prefix}.{name}.bias"]
        return y.view(b, t, heads, head_dim).transpose(1, 2)

    import torch

    pos = torch.arange(t)
    q, k, v = proj("q_proj"), proj("k_proj"), proj("v_proj")
    q, k = rope(q, pos, theta), rope(k, pos, theta)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.transpose(1, 2).reshape(b, t, heads * head_dim) @ p[f"{prefix}.o_proj.weight"].T


def mlp(x, p, prefix):
    import torch.nn.functional as F

    g = F.silu(x @ p[f"{prefix}.gate_proj.weight"].T)
    return (g * (x @ p[f"{prefix}.up_proj.weight"].T)) @ p[f"{prefix}.down_proj.weight"].T


class Target:
    """The frozen tiny Llama target, returning what each vLLM head consumes."""

    def __init__(self, model_dir: Path):
        import torch
        from safetensors.torch import load_file

        self.cfg = json.loads((model_dir / "config.json").read_text())
        self.w = {k: v.float() for k, v in load_file(str(model_dir / "model.safetensors")).items()}
        c = self.cfg
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        self.eps = c["rms_norm_eps"]
        self.theta = (c.get("rope_parameters") or {}).get("rope_theta") or c.get(
            "rope_theta", 10000.0
        )
        self.embed = self.w["model.embed_tokens.weight"]
        self.lm_head = self.w["lm_head.weight"]
        for t in self.w.values():
            t.requires_grad_(False)
        self._torch = torch

    def forward(self, ids):
        """-> logits, final normed hidden (EAGLE-1), pre-norm final (MiMo MTP), streams."""
        w = self.w
        h = self.embed[ids]
        streams = [h]  # streams[i] = residual stream entering layer i (vLLM aux id i)
        for i in range(self.layers):
            pre = f"model.layers.{i}"
            a = attention(
                rms(h, w[f"{pre}.input_layernorm.weight"], self.eps),
                w,
                f"{pre}.self_attn",
                self.heads,
                self.head_dim,
                self.theta,
            )
            h = h + a
            h = h + mlp(
                rms(h, w[f"{pre}.post_attention_layernorm.weight"], self.eps), w, f"{pre}.mlp"
            )
            streams.append(h)
        normed = rms(h, w["model.norm.weight"], self.eps)
        return normed @ self.lm_head.T, normed, h, streams


# ---------------------------------------------------------------- heads (vLLM's graphs)


def _param(shape, scale=0.02):
    import torch

    return torch.nn.Parameter(torch.randn(*shape) * scale)


def _ones(n):
    import torch

    return torch.nn.Parameter(torch.ones(n))


def _layer_params(prefix, hidden, inter, qkv_in, bias, input_norm, extra_norms=()):
    import torch

    p = {
        f"{prefix}.self_attn.q_proj.weight": _param((hidden, qkv_in)),
        f"{prefix}.self_attn.k_proj.weight": _param((hidden, qkv_in)),
        f"{prefix}.self_attn.v_proj.weight": _param((hidden, qkv_in)),
        f"{prefix}.self_attn.o_proj.weight": _param((hidden, hidden)),
        f"{prefix}.mlp.gate_proj.weight": _param((inter, hidden)),
        f"{prefix}.mlp.up_proj.weight": _param((inter, hidden)),
        f"{prefix}.mlp.down_proj.weight": _param((hidden, inter)),
        f"{prefix}.post_attention_layernorm.weight": _ones(hidden),
    }
    if input_norm:
        p[f"{prefix}.input_layernorm.weight"] = _ones(hidden)
    for n in extra_norms:
        p[f"{prefix}.{n}.weight"] = _ones(hidden)
    if bias:
        for n in ("q_proj", "k_proj", "v_proj"):
            p[f"{prefix}.self_attn.{n}.bias"] = torch.nn.Parameter(torch.zeros(hidden))
    return p


class Eagle1:
    """vLLM llama_eagle: h' = layer(fc(cat(embed(x_{t+1}), h_t))), no input norm, no final norm."""

    def __init__(self, tgt: Target):
        c = tgt.cfg
        hd, inter = c["hidden_size"], c["intermediate_size"]
        self.t = tgt
        self.p = {"fc.weight": _param((hd, 2 * hd))}
        self.p.update(_layer_params("layers.0", hd, inter, hd, False, input_norm=False))

    def step(self, emb_next, h):
        p, t = self.p, self.t
        x = (self._torch_cat([emb_next, h])) @ p["fc.weight"].T
        x = x + attention(x, p, "layers.0.self_attn", t.heads, t.head_dim, t.theta)
        x = x + mlp(
            rms(x, p["layers.0.post_attention_layernorm.weight"], t.eps), p, "layers.0.mlp"
        )
        return x, x @ t.lm_head.T  # next hidden fed back, logits over the target vocab

    @staticmethod
    def _torch_cat(xs):
        import torch

        return torch.cat(xs, -1)


class Eagle3:
    """vLLM llama_eagle3 with use_aux_hidden_state: fc over 3 streams, mid-layer, norm, lm_head."""

    def __init__(self, tgt: Target, draft_vocab: int):
        c = tgt.cfg
        hd, inter = c["hidden_size"], c["intermediate_size"]
        self.t = tgt
        self.p = {"fc.weight": _param((hd, 3 * hd)), "norm.weight": _ones(hd)}
        self.p.update(
            _layer_params(
                "midlayer", hd, inter, 2 * hd, False, input_norm=True, extra_norms=("hidden_norm",)
            )
        )
        self.p["lm_head.weight"] = _param((draft_vocab, hd))

    def combine(self, streams):
        import torch

        return torch.cat([streams[i] for i in EAGLE3_AUX_LAYERS], -1) @ self.p["fc.weight"].T

    def step(self, emb_next, h):
        import torch

        p, t = self.p, self.t
        e = rms(emb_next, p["midlayer.input_layernorm.weight"], t.eps)
        residual = h
        x = torch.cat([e, rms(h, p["midlayer.hidden_norm.weight"], t.eps)], -1)
        x = attention(x, p, "midlayer.self_attn", t.heads, t.head_dim, t.theta)
        residual = x + residual
        x = mlp(
            rms(residual, p["midlayer.post_attention_layernorm.weight"], t.eps), p, "midlayer.mlp"
        )
        prenorm = x + residual
        normed = rms(prenorm, p["norm.weight"], t.eps)
        return prenorm, normed @ p["lm_head.weight"].T  # logits over the draft vocab


class MimoMtp:
    """vLLM mimo_mtp layer 0: final_norm(block(input_proj(cat(norm(h), norm(embed)))))."""

    P = "model.mtp_layers.0"

    def __init__(self, tgt: Target):
        c = tgt.cfg
        hd, inter = c["hidden_size"], c["intermediate_size"]
        self.t = tgt
        P = self.P
        self.p = {
            f"{P}.token_layernorm.weight": _ones(hd),
            f"{P}.hidden_layernorm.weight": _ones(hd),
            f"{P}.final_layernorm.weight": _ones(hd),
            f"{P}.input_proj.weight": _param((hd, 2 * hd)),
        }
        self.p.update(_layer_params(P, hd, inter, hd, True, input_norm=True))

    def step(self, emb_next, h_prenorm):
        import torch

        p, t, P = self.p, self.t, self.P
        e = emb_next.clone()
        e[:, 0] = 0  # vLLM masks the embedding at position 0
        x = (
            torch.cat(
                [
                    rms(h_prenorm, p[f"{P}.hidden_layernorm.weight"], t.eps),
                    rms(e, p[f"{P}.token_layernorm.weight"], t.eps),
                ],
                -1,
            )
            @ p[f"{P}.input_proj.weight"].T
        )
        x = x + attention(
            rms(x, p[f"{P}.input_layernorm.weight"], t.eps),
            p,
            f"{P}.self_attn",
            t.heads,
            t.head_dim,
            t.theta,
            bias=True,
        )
        x = x + mlp(rms(x, p[f"{P}.post_attention_layernorm.weight"], t.eps), p, f"{P}.mlp")
        out = rms(x, p[f"{P}.final_layernorm.weight"], t.eps)
        return out, out @ t.lm_head.T


# ---------------------------------------------------------------- training


def draft_vocab_map(train_ids, vocab: int, size: int):
    """Most frequent target tokens (sorted by id) -> (draft->target ids, d2t offsets, t2d mask)."""
    import torch

    counts = torch.bincount(train_ids, minlength=vocab)
    keep = torch.sort(torch.topk(counts, size).indices).values
    d2t = keep - torch.arange(size)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[keep] = True
    covered = counts[keep].sum().item() / counts.sum().item()
    return keep, d2t, t2d, covered


def kl(d_logits, t_logp):
    """Per-token KL(target || head), on flattened positions."""
    import torch.nn.functional as F

    v = d_logits.shape[-1]
    return F.kl_div(
        F.log_softmax(d_logits.reshape(-1, v), -1),
        t_logp.reshape(-1, v),
        log_target=True,
        reduction="batchmean",
    )


def head_losses(kind, head, tgt, ids, keep=None):
    """Teacher-forced loss: KL to the target's next distribution (+ feature loss for EAGLE-1)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        logits, normed, prenorm, streams = tgt.forward(ids)
    emb_next = tgt.embed[ids[:, 1:]]  # token t+1 at position t
    t_logp = F.log_softmax(logits[:, 1:], -1)  # target's distribution for token t+2
    if kind == "eagle":
        h_out, d_logits = head.step(emb_next, normed[:, :-1])
        feat = F.smooth_l1_loss(h_out, normed[:, 1:])
        # Second draft step (the head's own feature fed back), as vLLM runs it for k >= 2.
        h2, d2 = head.step(tgt.embed[ids[:, 2:]], h_out[:, :-1])
        kl2 = kl(d2, F.log_softmax(logits[:, 2:], -1))
        return kl(d_logits, t_logp) + 0.5 * kl2 + 10.0 * feat, d_logits
    if kind == "eagle3":
        h0 = head.combine([s[:, :-1] for s in streams])
        _, d_logits = head.step(emb_next, h0)
        t_sub = F.log_softmax(logits[:, 1:, keep], -1)  # renormalised over the draft vocab
        return kl(d_logits, t_sub), d_logits
    _, d_logits = head.step(emb_next, prenorm[:, :-1])
    return kl(d_logits, t_logp), d_logits


def offline_acceptance(kind, head, tgt, held, keep=None, n=16, seq=256) -> dict:
    """Greedy agreement on held-out text: position 1 always, position 2 for EAGLE-1."""
    import torch

    rng = random.Random(99)
    L = len(held) - seq - 1
    x = torch.stack([held[s : s + seq] for s in (rng.randrange(L) for _ in range(n))])
    with torch.no_grad():
        logits, normed, prenorm, streams = tgt.forward(x)
        t_next = logits[:, 1:].argmax(-1)  # target's greedy token t+2
        emb_next = tgt.embed[x[:, 1:]]
        out = {}
        if kind == "eagle":
            h, d = head.step(emb_next, normed[:, :-1])
            d_tok = d.argmax(-1)
            out["pos1"] = (d_tok == t_next).float().mean().item()
            # Position 2 given position 1 was right: feed the head's feature and its token.
            h2, d2 = head.step(tgt.embed[d_tok[:, :-1]], h[:, :-1])
            ok1 = d_tok[:, :-1] == t_next[:, :-1]
            ok2 = d2.argmax(-1) == logits[:, 2:].argmax(-1)
            out["pos2_given_pos1"] = (ok2 & ok1).float().sum().item() / max(1, ok1.sum().item())
        elif kind == "eagle3":
            _, d = head.step(emb_next, head.combine([s[:, :-1] for s in streams]))
            d_tok = keep[d.argmax(-1)]
            out["pos1"] = (d_tok == t_next).float().mean().item()
        else:
            _, d = head.step(emb_next, prenorm[:, :-1])
            out["pos1"] = (d.argmax(-1)[:, 1:] == t_next[:, 1:]).float().mean().item()
    return {k: round(v, 4) for k, v in out.items()}


def train_head(
    kind, head, tgt, train_ids, *, steps, seq, bsz, lr, max_seconds, keep=None, loss_of=None
):
    """AdamW on ``head.p`` over random windows of seq + 1 tokens; ``loss_of(batch)`` replaces
    the EAGLE-recipe loss (scripts/train_medusa.py)."""
    import torch

    params = list(head.p.values())
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng = random.Random(0)
    n = len(train_ids) - seq - 2
    t0, done, loss_v = time.time(), 0, math.nan
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=max(10, steps // 20))
        x = torch.stack(
            [train_ids[s : s + seq + 1] for s in (rng.randrange(n) for _ in range(bsz))]
        )
        loss = loss_of(x) if loss_of else head_losses(kind, head, tgt, x, keep)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        done, loss_v = step + 1, loss.item()
        if step % 25 == 0:
            print(f"[{kind}] step {step} loss {loss_v:.3f} {time.time() - t0:.0f}s", flush=True)
        if time.time() - t0 > max_seconds:
            print(f"[{kind}] time budget reached at step {done}", flush=True)
            break
    return {
        "steps": done,
        "final_train_loss": round(loss_v, 4),
        "seconds": round(time.time() - t0, 1),
        "tokens_seen": done * bsz * seq,
    }


# ---------------------------------------------------------------- checkpoints


def _save(tensors: dict, out: Path, cfg: dict, tok_src: Path) -> None:
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            k: (v.detach().to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
            for k, v in tensors.items()
        },
        str(out / "model.safetensors"),
    )
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for f in (
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ):
        if (tok_src / f).exists():
            (out / f).write_bytes((tok_src / f).read_bytes())


def eagle1_config(tcfg: dict) -> dict:
    cfg = dict(tcfg)
    cfg.update(architectures=["LlamaForCausalLM"], num_hidden_layers=1)
    return cfg


def eagle3_config(tcfg: dict) -> dict:
    cfg = dict(tcfg)
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        draft_vocab_size=DRAFT_VOCAB,
        target_hidden_size=tcfg["hidden_size"],
        eagle_config={
            "eagle_aux_hidden_state_layer_ids": EAGLE3_AUX_LAYERS,
            "use_aux_hidden_state": True,
        },
    )
    return cfg


def mimo_config(tcfg: dict) -> dict:
    theta = (tcfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    return {
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": tcfg["hidden_size"],
        "intermediate_size": tcfg["intermediate_size"],
        "num_hidden_layers": tcfg["num_hidden_layers"],
        "num_attention_heads": tcfg["num_attention_heads"],
        "num_key_value_heads": tcfg["num_key_value_heads"],
        "num_nextn_predict_layers": 1,
        "vocab_size": tcfg["vocab_size"],
        "max_position_embeddings": tcfg["max_position_embeddings"],
        "rope_theta": theta,
        "rms_norm_eps": tcfg["rms_norm_eps"],
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": tcfg["num_hidden_layers"],
        "bos_token_id": tcfg.get("bos_token_id", 0),
        "eos_token_id": tcfg.get("eos_token_id", 0),
        "pad_token_id": tcfg.get("pad_token_id", 0),
        "torch_dtype": "bfloat16",
    }


def check_forward(tgt: Target, model_dir: Path, ids) -> float:
    """Max |logit difference| between this script's forward and Hugging Face's Llama."""
    import torch
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(ids).logits
        mine = tgt.forward(ids)[0]
    return (ref - mine).abs().max().item()


def budget(args: argparse.Namespace) -> dict:
    """The command line's training budget, as ``train_head`` takes it."""
    return {
        "steps": args.steps,
        "seq": args.seq,
        "bsz": args.batch,
        "lr": args.lr,
        "max_seconds": args.minutes * 60,
    }


def load_target_and_corpus(tdir: Path):
    """The frozen target, the corpus's train and held-out token ids (the target's own split)
    and the check of this script's forward against Hugging Face's (exits when they differ)."""
    import torch
    from tokenizers import Tokenizer

    tgt = Target(tdir)
    tok = Tokenizer.from_file(str(tdir / "tokenizer.json"))
    root = Path(sysconfig.get_paths()["stdlib"])
    train_files, held_files = split_files(corpus_files(), root)
    eos = tok.token_to_id("<|endoftext|>")

    def encode(paths):
        out: list[int] = []
        for enc in tok.encode_batch([t for t in (read_text(p) for p in paths) if t]):
            out.extend(enc.ids)
            out.append(eos)
        return torch.tensor(out, dtype=torch.long)

    train_ids, held_ids = encode(train_files), encode(held_files)
    print(f"tokens: train {len(train_ids)}, held-out {len(held_ids)}", flush=True)
    diff = check_forward(tgt, tdir, held_ids[:128][None])
    print(f"functional forward vs Hugging Face: max |logit diff| {diff:.2e}", flush=True)
    if diff > 1e-2:
        raise SystemExit(f"this script's target forward disagrees with Hugging Face ({diff})")
    return tgt, train_ids, held_ids, diff


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", type=Path, default=Path("models/tiny"))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--minutes", type=float, default=4.0, help="time budget per head")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--only", choices=["eagle", "eagle3", "mtp"], action="append")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from safetensors.torch import load_file

    torch.manual_seed(args.seed)
    t_start = time.time()
    tdir = args.models / "target"
    tgt, train_ids, held_ids, diff = load_target_and_corpus(tdir)

    report_path = args.models / "heads_report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    report.update(torch=torch.__version__, forward_check_max_abs_logit_diff=diff)
    kinds = args.only or ["eagle", "eagle3", "mtp"]
    keep, d2t, t2d, covered = draft_vocab_map(train_ids, tgt.cfg["vocab_size"], DRAFT_VOCAB)
    for kind in kinds:
        torch.manual_seed(args.seed)
        head = {
            "eagle": lambda: Eagle1(tgt),
            "eagle3": lambda: Eagle3(tgt, DRAFT_VOCAB),
            "mtp": lambda: MimoMtp(tgt),
        }[kind]()
        before = offline_acceptance(kind, head, tgt, held_ids, keep)
        stats = train_head(kind, head, tgt, train_ids, **budget(args), keep=keep)
        after = offline_acceptance(kind, head, tgt, held_ids, keep)
        print(f"[{kind}] offline greedy acceptance before {before} after {after}", flush=True)
        entry = {
            **stats,
            "offline_acceptance_random_init": before,
            "offline_acceptance": after,
            "params": sum(p.numel() for p in head.p.values()),
        }
        if kind == "eagle":
            _save(dict(head.p), args.models / "eagle", eagle1_config(tgt.cfg), tdir)
        elif kind == "eagle3":
            _save(
                {**head.p, "d2t": d2t, "t2d": t2d},
                args.models / "eagle3",
                eagle3_config(tgt.cfg),
                tdir,
            )
            entry.update(
                draft_vocab_size=DRAFT_VOCAB,
                draft_vocab_token_coverage=round(covered, 4),
                aux_layers=EAGLE3_AUX_LAYERS,
            )
        else:
            tensors = dict(load_file(str(tdir / "model.safetensors")))
            hd = tgt.cfg["hidden_size"]
            for i in range(tgt.layers):
                for n in ("q_proj", "k_proj", "v_proj"):
                    tensors[f"model.layers.{i}.self_attn.{n}.bias"] = torch.zeros(hd)
            tensors.update(head.p)
            _save(tensors, args.models / "target-mtp", mimo_config(tgt.cfg), tdir)
        report[kind] = entry
        report_path.write_text(json.dumps(report, indent=2) + "\n")
    report["wall_seconds_last_run"] = round(time.time() - t_start, 1)
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
