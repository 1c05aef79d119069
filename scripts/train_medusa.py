"""Train Medusa heads for the tiny target on this CPU (``models/tiny/medusa``).

Why: SpecTune searches ``method: medusa`` and must launch it for real on the embedded
default; a random-weight head accepts nothing. Medusa (Cai et al., arXiv:2401.10774) puts K
heads on the target's last hidden state: head i, reading the final normed hidden state at the
position that produced the latest token, guesses the token i + 1 places after it. Each head
is vLLM 0.32's ``medusa.py`` graph: a residual block (x + SiLU(W x), W started at zero, so
a head starts as the target's own next-token guess) and its own lm_head, started from the
target's. Trained on KL divergence to the target's distribution at that position (Medusa-2's
self-distillation), on the same corpus and split as the target, the target frozen.

    python scripts/train_medusa.py --models models/tiny

Writes ``medusa/`` (``MedusaModel``, vLLM's weight names ``blocks.{i}.layers.0.weight`` and
``lm_heads.{i}.weight``) and adds a ``medusa`` entry to ``heads_report.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_heads import (  # noqa: E402
    Target,
    _save,
    budget,
    kl,
    load_target_and_corpus,
    train_head,
)


class Medusa:
    """K heads over the target's final normed hidden state (vLLM's Medusa graph)."""

    def __init__(self, tgt: Target, num_heads: int):
        import torch

        h = tgt.cfg["hidden_size"]
        self.num_heads = num_heads
        self.p: dict = {}
        for i in range(num_heads):
            self.p[f"blocks.{i}.layers.0.weight"] = torch.nn.Parameter(torch.zeros(h, h))
            self.p[f"lm_heads.{i}.weight"] = torch.nn.Parameter(tgt.lm_head.clone())

    def logits(self, normed) -> list:
        """Head i's logits at every position: its guess i + 2 tokens after that position."""
        import torch.nn.functional as F

        out = []
        for i in range(self.num_heads):
            x = normed + F.silu(normed @ self.p[f"blocks.{i}.layers.0.weight"].T)
            out.append(x @ self.p[f"lm_heads.{i}.weight"].T)
        return out


def losses(head: Medusa, tgt: Target, ids):
    """Mean over heads of KL(target at t + i + 1 || head i at t)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        logits, normed, _, _ = tgt.forward(ids)
        t_logp = F.log_softmax(logits, -1)
    total = 0.0
    for i, d in enumerate(head.logits(normed)):
        total = total + kl(d[:, : -(i + 1)], t_logp[:, i + 1 :])
    return total / head.num_heads


def acceptance(head: Medusa, tgt: Target, held, n: int = 16, seq: int = 256) -> dict:
    """Greedy agreement on held-out text: head i right, and right given heads 0..i-1 were."""
    import torch

    rng = random.Random(99)
    L = len(held) - seq - 1
    x = torch.stack([held[s : s + seq] for s in (rng.randrange(L) for _ in range(n))])
    with torch.no_grad():
        logits, normed, _, _ = tgt.forward(x)
        want = logits.argmax(-1)
        K = head.num_heads
        T = seq - K
        ok = [
            (d.argmax(-1)[:, :T] == want[:, i + 1 : i + 1 + T])
            for i, d in enumerate(head.logits(normed))
        ]
    out, chain = {}, torch.ones_like(ok[0])
    for i, o in enumerate(ok):
        out[f"pos{i + 1}"] = round(o.float().mean().item(), 4)
        given = chain.sum().item()
        out[f"pos{i + 1}_given_earlier"] = round((o & chain).sum().item() / max(1, given), 4)
        chain = chain & o
    return out


def medusa_config(tcfg: dict, num_heads: int) -> dict:
    return {
        "architectures": ["MedusaModel"],
        "model_type": "medusa",
        "hidden_size": tcfg["hidden_size"],
        "vocab_size": tcfg["vocab_size"],
        "num_heads": num_heads,
        "num_hidden_layers": 1,
        "medusa_fc_bias": False,
        "dtype": "bfloat16",
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", type=Path, default=Path("models/tiny"))
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--minutes", type=float, default=4.0, help="time budget")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    torch.manual_seed(args.seed)
    t_start = time.time()
    tgt, train_ids, held_ids, _ = load_target_and_corpus(args.models / "target")
    head = Medusa(tgt, args.heads)
    before = acceptance(head, tgt, held_ids)
    # Windows of seq tokens: train_head draws seq + 1.
    loss_of = lambda x: losses(head, tgt, x[:, :-1])  # noqa: E731
    stats = train_head("medusa", head, tgt, train_ids, **budget(args), loss_of=loss_of)
    after = acceptance(head, tgt, held_ids)
    print(f"[medusa] offline greedy acceptance before {before} after {after}", flush=True)
    tdir = args.models / "target"
    _save(dict(head.p), args.models / "medusa", medusa_config(tgt.cfg, args.heads), tdir)
    report_path = args.models / "heads_report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    report["medusa"] = {
        **stats,
        "num_heads": args.heads,
        "seed": args.seed,
        "offline_acceptance_at_init": before,
        "offline_acceptance": after,
        "params": sum(p.numel() for p in head.p.values()),
        "wall_seconds": round(time.time() - t_start, 1),
    }
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["medusa"], indent=2))


if __name__ == "__main__":
    main()
