"""Train SpecTune's embedded tiny target/draft pair on this machine's CPU.

Why: the embedded default must run real speculative decoding with no model hub. This script
makes everything from the Python standard library's own sources, which every machine has:

1. a byte-level BPE tokenizer (shared by target and draft),
2. a Llama-architecture target trained on next-token prediction,
3. a Llama draft (at most 1/8 of the target) distilled from the target (KL to its logits),
4. the code-completion workload, cut from held-out files the models never saw.

Outputs Hugging Face folders (config.json, model.safetensors in bf16, tokenizer files) that
vLLM loads directly, and a JSON report with sizes, losses and offline greedy agreement.

    python scripts/train_tiny_pair.py --out models/tiny
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sysconfig
import time
import zlib
from pathlib import Path

EOS = "<|endoftext|>"
HELD_OUT_MOD = 20  # one file in 20 (by crc32 of its path) is held out for the workload


def corpus_files() -> list[Path]:
    """Standard-library .py files, sorted, minus test suites (odd, huge, unlike user code)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(("test/", "site-packages/", "lib2to3/", "idlelib/idle_test/")):
            continue
        if "/test" in rel or "/tests/" in rel:
            continue
        files.append(p)
    return files


def split_files(files: list[Path], root: Path) -> tuple[list[Path], list[Path]]:
    train, held = [], []
    for p in files:
        key = zlib.crc32(p.relative_to(root).as_posix().encode())
        (held if key % HELD_OUT_MOD == 0 else train).append(p)
    return train, held


def read_text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""


def train_tokenizer(texts: list[str], vocab_size: int, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    return tok


# The tiny models' chat template, in the "### System/User/Assistant" style of the built-in
# chat set: chat workloads reach the engine through it (vLLM applies it; SpecTune never does).
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] in ('system', 'developer') %}{{ '### System: ' + m['content'] + '\\n' }}"
    "{% elif m['role'] == 'user' %}{{ '### User: ' + m['content'] + '\\n' }}"
    "{% elif m['role'] == 'assistant' %}"
    "{{ '### Assistant:\\n' + m['content'] + eos_token + '\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '### Assistant:\\n' }}{% endif %}"
)


def write_tokenizer_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOS,
        "eos_token": EOS,
        "unk_token": EOS,
        "pad_token": EOS,
        "model_max_length": 1024,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (dst / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": EOS, "eos_token": EOS, "unk_token": EOS, "pad_token": EOS}) + "\n"
    )


def llama_config(vocab: int, hidden: int, layers: int, heads: int, inter: int, tie: bool):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=tie,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        torch_dtype="bfloat16",
    )


def batches(ids, seq: int, bsz: int, rng: random.Random):
    import torch

    n = len(ids) - seq - 1
    while True:
        starts = [rng.randrange(n) for _ in range(bsz)]
        yield torch.stack([ids[s : s + seq + 1] for s in starts])


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def evaluate(model, ids, seq: int, n: int = 8, teacher=None) -> dict:
    """Mean next-token loss on held-out text; with a teacher, greedy (argmax) agreement."""
    import torch
    import torch.nn.functional as F

    rng = random.Random(1234)
    gen = batches(ids, seq, n, rng)
    x = next(gen)
    with torch.no_grad():
        logits = model(x[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        out = {"loss": round(loss.item(), 4)}
        if teacher is not None:
            t = teacher(x[:, :-1]).logits
            out["greedy_agreement"] = round(
                (t.argmax(-1) == logits.argmax(-1)).float().mean().item(), 4
            )
    return out


def train(model, ids, *, steps, seq, bsz, lr, max_seconds, teacher=None, log_every=25, tag=""):
    """Next-token training; with a teacher, distillation (KL to the teacher's soft targets)."""
    import torch
    import torch.nn.functional as F

    rng = random.Random(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.05)
    gen = batches(ids, seq, bsz, rng)
    t0 = time.time()
    done = 0
    loss_v = float("nan")
    model.train()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=max(10, steps // 20))
        x = next(gen)
        logits = model(x[:, :-1]).logits
        if teacher is None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        else:
            with torch.no_grad():
                t_logits = teacher(x[:, :-1]).logits
            v = logits.shape[-1]
            loss = F.kl_div(
                F.log_softmax(logits.reshape(-1, v), -1),
                F.log_softmax(t_logits.reshape(-1, v), -1),
                log_target=True,
                reduction="batchmean",
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step + 1
        loss_v = loss.item()
        if step % log_every == 0:
            el = time.time() - t0
            print(
                f"[{tag}] step {step} loss {loss_v:.3f} {done * bsz * seq / el:.0f} tok/s",
                flush=True,
            )
        if time.time() - t0 > max_seconds:
            print(f"[{tag}] time budget reached at step {done}", flush=True)
            break
    model.eval()
    return {
        "steps": done,
        "final_train_loss": round(loss_v, 4),
        "seconds": round(time.time() - t0, 1),
        "tokens_seen": done * bsz * seq,
    }


def save_model(model, out: Path) -> None:
    import torch

    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    model.to(torch.float32)


def make_workload(held_texts: list[tuple[str, str]], tok, out: Path, n: int, seed: int) -> int:
    """Code-completion prompts: a run of whole lines (64-160 tokens) from held-out files."""
    rng = random.Random(seed)
    rows = []
    cands = [(name, t) for name, t in held_texts if len(t) > 2000]
    rng.shuffle(cands)
    for name, text in cands:
        lines = text.splitlines(keepends=True)
        if len(lines) < 40:
            continue
        start = rng.randrange(0, len(lines) - 30)
        prompt = ""
        for line in lines[start:]:
            if len(tok.encode(prompt + line).ids) > 160:
                break
            prompt += line
        ntok = len(tok.encode(prompt).ids)
        if ntok < 64 or not prompt.strip():
            continue
        rows.append({"prompt": prompt, "source": name})
        if len(rows) >= n:
            break
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return len(rows)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("models/tiny"))
    ap.add_argument(
        "--workload-out", type=Path, default=Path("tuner/workloads/code_completion.jsonl")
    )
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--target-steps", type=int, default=900)
    ap.add_argument("--target-minutes", type=float, default=18.0)
    ap.add_argument("--draft-steps", type=int, default=600)
    ap.add_argument("--draft-minutes", type=float, default=7.0)
    ap.add_argument("--corpus-mb", type=float, default=12.0, help="cap on training text")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.time()
    root = Path(sysconfig.get_paths()["stdlib"])
    train_files, held_files = split_files(corpus_files(), root)
    texts, size = [], 0
    for p in train_files:
        t = read_text(p)
        if t:
            texts.append(t)
            size += len(t)
        if size > args.corpus_mb * 1e6:
            break
    held = [(p.relative_to(root).as_posix(), read_text(p)) for p in held_files]
    print(
        f"corpus: {len(texts)} train files ({size / 1e6:.1f} MB), {len(held)} held out", flush=True
    )

    tok_dir = args.out / "_tokenizer"
    tok = train_tokenizer(texts, args.vocab, tok_dir)
    eos_id = tok.token_to_id(EOS)
    train_ids: list[int] = []
    for enc in tok.encode_batch(texts):
        train_ids.extend(enc.ids)
        train_ids.append(eos_id)
    held_ids: list[int] = []
    for enc in tok.encode_batch([t for _, t in held]):
        held_ids.extend(enc.ids)
        held_ids.append(eos_id)
    train_t = torch.tensor(train_ids, dtype=torch.long)
    held_t = torch.tensor(held_ids, dtype=torch.long)
    print(
        f"tokens: train {len(train_ids)}, held-out {len(held_ids)}, "
        f"{size / len(train_ids):.2f} bytes/token",
        flush=True,
    )

    n_prompts = make_workload(held, tok, args.workload_out, n=48, seed=args.seed)
    print(f"workload: {n_prompts} prompts -> {args.workload_out}", flush=True)

    tcfg = llama_config(args.vocab, hidden=256, layers=5, heads=4, inter=768, tie=False)
    target = LlamaForCausalLM(tcfg)
    tstats = train(
        target,
        train_t,
        steps=args.target_steps,
        seq=args.seq,
        bsz=args.batch,
        lr=3e-3,
        max_seconds=args.target_minutes * 60,
        tag="target",
    )
    teval = evaluate(target, held_t, args.seq)
    print(f"target held-out {teval}", flush=True)

    dcfg = llama_config(args.vocab, hidden=128, layers=1, heads=2, inter=384, tie=True)
    draft = LlamaForCausalLM(dcfg)
    for p in target.parameters():
        p.requires_grad_(False)
    dstats = train(
        draft,
        train_t,
        steps=args.draft_steps,
        seq=args.seq,
        bsz=args.batch,
        lr=4e-3,
        max_seconds=args.draft_minutes * 60,
        teacher=target,
        tag="draft",
    )
    deval = evaluate(draft, held_t, args.seq, teacher=target)
    print(f"draft held-out {deval}", flush=True)

    for name, model in (("target", target), ("draft", draft)):
        save_model(model, args.out / name)
        write_tokenizer_files(tok_dir, args.out / name)
    for f in tok_dir.iterdir():
        f.unlink()
    tok_dir.rmdir()

    report = {
        "command": "python scripts/train_tiny_pair.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "python_stdlib": sysconfig.get_paths()["stdlib"],
        "corpus": {
            "train_files": len(texts),
            "train_mb": round(size / 1e6, 2),
            "held_out_files": len(held),
            "train_tokens": len(train_ids),
            "held_out_tokens": len(held_ids),
        },
        "vocab_size": args.vocab,
        "target": {"params": n_params(target), **tstats, "held_out": teval},
        "draft": {
            "params": n_params(draft),
            **dstats,
            "held_out": deval,
            "params_ratio": round(n_params(draft) / n_params(target), 4),
        },
        "workload_prompts": n_prompts,
        "wall_seconds": round(time.time() - t_start, 1),
        "torch": torch.__version__,
    }
    (args.out / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
