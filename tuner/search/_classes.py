"""Batch size and memory share as constraints, not blind axes.

Why: an engine runs min(concurrency, max_num_seqs) requests at once and queues the rest
(``tuner.space._batch``). Two ``max_num_seqs`` values that give the same running batch at
every concurrency level of the space (for instance both at least the highest level) cannot
be told apart by any measured level, except through the memory a larger value reserves: one
class, measured once at its smallest member (the least reserved memory leaves the KV cache
the most). Values that give a different running batch at some level (one queues requests
there) are distinct classes: a real axis, never collapsed. And once a share of memory gives a
KV cache that holds the workload's worst case (every concurrent request at its longest
prompt plus ``max_tokens`` plus the drafted tokens), a larger share changes nothing and a
smaller one can only preempt. A proposal of another member of a class is launched as that
member (or reuses its measurement), and the trial says so.

What is assumed, and stated where the trial shows it: speed depends on memory only through
the KV cache. A measured KV capacity comes from the engine's own start-up log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tuner.space import SearchSpace, batch_class, batch_classes
from tuner.workloads import Prompt

__all__ = ["canonical", "kv_need_tokens", "memory_family"]

_TEMPLATE_TOKENS = 64  # a chat template's own tokens, an upper bound for the built-in ones


def kv_need_tokens(space: SearchSpace, prompts: dict[str, Sequence[Prompt]]) -> int:
    """An upper bound on KV tokens the workload can hold at once: the highest concurrency
    times the longest request (prompt bytes bound its tokens for byte-level tokenizers).
    Not capped by a smaller ``max_num_seqs``: one bound for every batch class, so a memory
    share is judged the same way whichever class launched it."""
    depth = 0
    for name in space.methods.enabled():
        spec = getattr(space.methods, name)
        depth = max(depth, spec.num_speculative_tokens.max)
    longest = 0
    for wl in space.all_workloads:
        for p in prompts.get(wl.name, ()):
            out = p.max_tokens or wl.max_tokens
            # A conversation's last turn holds every turn's text, template and reply.
            held = p.text_bytes + p.turns * (_TEMPLATE_TOKENS + out) + depth
            longest = max(longest, held)
    longest = min(longest, space.engine.max_model_len) if longest else space.engine.max_model_len
    return max(space.concurrency) * longest


def memory_family(params: dict[str, Any]) -> tuple[Any, ...]:
    """Configurations whose KV cache gets the same memory: same target, same proposer
    weights (an n-gram lookup has none)."""
    m = params.get("method")
    weights = params.get("draft") or params.get("head") or ("mtp" if m == "mtp" else None)
    return params.get("target"), weights


def canonical(
    params: dict[str, Any],
    space: SearchSpace,
    need_tokens: int | None,
    measured: Iterable[tuple[dict[str, Any], int | None]],
) -> tuple[dict[str, Any], list[str]]:
    """The member of ``params``' class to launch, and why it differs (empty when it does
    not). ``measured``: (params, KV-cache tokens) of every launched trial of the job."""
    out, why = dict(params), []
    seqs = out.get("max_num_seqs")
    members = next(
        (m for m in batch_classes(space.max_num_seqs, space.concurrency) if seqs in m), None
    )
    if members is not None and seqs != members[0]:
        smallest = members[0]
        runs = ", ".join(
            f"{b} at {c}"
            for c, b in zip(
                space.concurrency, batch_class(smallest, space.concurrency), strict=True
            )
        )
        why.append(
            f"max_num_seqs {seqs} -> {smallest}: both run the same batch at every concurrency "
            f"level (min(concurrency, max_num_seqs): {runs}), so they differ only in reserved "
            "memory and the smallest leaves the KV cache the most"
        )
        out["max_num_seqs"] = smallest
    if need_tokens is None or len(space.memory_fraction) < 2:
        return out, why
    fam = memory_family(out)
    held = sorted(
        (float(p["memory_fraction"]), kv)
        for p, kv in measured
        if kv is not None and kv >= need_tokens and memory_family(p) == fam
    )
    if held and held[0][0] != out["memory_fraction"]:
        f, kv = held[0]
        larger = f < out["memory_fraction"]
        rel = "a larger share changes nothing" if larger else "a smaller one cannot be faster"
        why.append(
            f"memory_fraction {out['memory_fraction']} -> {f}: at {f} the KV cache "
            f"({kv} tokens) already holds the workload's worst case ({need_tokens} tokens); "
            f"{rel}"
        )
        out["memory_fraction"] = f
    return out, why
