"""A FAKE surface whose numbers follow the chain-proposer model exactly, for tests of the
guided search: per-position acceptance per proposer, a step cost linear in depth, a KV cache
that grows with the memory share. Measured by nothing; its header says ``FAKE formula``.

Every metric is coherent with the others (TPOT = wait + step / tau, end-to-end = TTFT +
tokens x TPOT, throughput = concurrency x tokens / end-to-end), as a real engine's are.
A ``max_num_seqs`` B below the concurrency C runs a batch of B and queues the rest: a closed
loop's queue wait is (C/B - 1) x the service time (prefill + decode), added to TTFT.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.surface.fake_surface import write_rows

SPACE = """
name: chain-surface
engine: {model: target, served_model_name: fake}
methods:
  ngram:
    num_speculative_tokens: {min: 1, max: 6}
    prompt_lookup_min: {min: 1, max: 2}
    prompt_lookup_max: {min: 3, max: 3}
  draft_model: {num_speculative_tokens: {min: 1, max: 6}, drafts: [draft-a, draft-b]}
  eagle: {num_speculative_tokens: {min: 1, max: 6}, heads: [head]}
max_num_seqs: [4, 8, 16]
memory_fraction: [0.1, 0.2, 0.4]
concurrency: [1, 4]
objective_concurrency: 4
workload: {builtin: code_completion, num_prompts: 4, max_tokens: 32}
measurement: {repeats: 3, confirm_top: 0}
slo: {p99_tpot_ms: 60}
trials: 30
seed: 0
"""

OUT_TOKENS = 32
# P(position i accepted), cumulative (what vLLM's per-position counters give).
ACCEPT = {
    "ngram1": [0.7, 0.5, 0.35, 0.25, 0.18, 0.12],
    "ngram2": [0.6, 0.4, 0.25, 0.15, 0.1, 0.06],
    "draft-a": [0.85, 0.7, 0.58, 0.47, 0.38, 0.3],
    "draft-b": [0.8, 0.6, 0.45, 0.33, 0.25, 0.18],
    "head": [0.9, 0.78, 0.66, 0.55, 0.45, 0.36],
}
# Step cost (ms) at batch 1: a + b * k; larger batches multiply it.
STEP = {
    "none": (10.0, 0.0),
    "ngram": (10.3, 0.9),
    "draft_model": (11.0, 2.4),
    "eagle": (10.6, 3.2),
}
KV_PER_FRACTION = 1_500  # KV tokens per 0.1 of memory (a draft or head takes some)
NEED = 2_048  # the space's worst case: 4 requests x max_model_len 512 (kv_need_tokens)


def proposer(c: dict[str, Any]) -> str:
    if c["method"] == "ngram":
        return f"ngram{c['prompt_lookup_min']}"
    return c.get("draft") or c.get("head") or c["method"]


def kv_tokens(c: dict[str, Any]) -> int:
    eaten = 400 if c["method"] in ("draft_model", "eagle") else 0
    return int(c["memory_fraction"] * 10 * KV_PER_FRACTION) - eaten - 20 * c["max_num_seqs"]


def point(c: dict[str, Any], level: int) -> dict[str, float]:
    """Noise-free metrics of one configuration at one concurrency."""
    k = int(c.get("num_speculative_tokens") or 0) if c["method"] != "none" else 0
    acc = ACCEPT[proposer(c)][:k] if k else []
    tau = 1.0 + sum(acc)
    a, b = STEP[c["method"]]
    run = min(level, c["max_num_seqs"])  # the running batch; the rest queue
    batch_cost = 1.0 + 0.25 * (run - 1)
    step = (a + b * k) * batch_cost
    # Too little KV cache: requests are preempted and recomputed.
    preempt = 1.0 if kv_tokens(c) >= NEED else 1.3
    wait = 0.8 * (run - 1) * preempt
    tpot = wait + step / tau
    prefill = 25.0 * (1 + 0.5 * (run - 1))
    queue = (level / run - 1.0) * (prefill + OUT_TOKENS * tpot)
    ttft = prefill + queue
    e2e = ttft + OUT_TOKENS * tpot
    return {
        "tau": tau,
        "acc": acc,
        "mean_itl_ms": step,
        "mean_tpot_ms": tpot,
        "mean_ttft_ms": ttft,
        "mean_queue_ms": queue,
        "mean_e2e_ms": e2e,
        "output_tok_per_s": level * OUT_TOKENS / (e2e / 1000.0),
    }


def _metrics(c: dict[str, Any], level: int) -> dict[str, Any]:
    p = point(c, level)

    def st(v: float) -> dict[str, float]:
        return {"median": v, "mad": v * 0.004, "ci95_low": v * 0.99, "ci95_high": v * 1.01, "n": 3}

    tps, tpot = p["output_tok_per_s"], p["mean_tpot_ms"]
    spec = c["method"] != "none"
    k = int(c.get("num_speculative_tokens") or 0)
    return {
        "workload": "code_completion",
        "concurrency": level,
        "output_tok_per_s": tps,
        "requests_per_s": tps / OUT_TOKENS,
        "mean_tpot_ms": tpot,
        "p99_tpot_ms": tpot * 1.3,
        "mean_itl_ms": p["mean_itl_ms"],
        "mean_ttft_ms": p["mean_ttft_ms"],
        "p99_ttft_ms": p["mean_ttft_ms"] * 1.5,
        "mean_queue_ms": p["mean_queue_ms"],
        "mean_e2e_ms": p["mean_e2e_ms"],
        "p99_e2e_ms": p["mean_e2e_ms"] * 1.2,
        "output_tokens": 4 * OUT_TOKENS,
        "num_ok": 4,
        "num_failed": 0,
        "num_requests": 4,
        "noisy": False,
        "acceptance_rate": (p["tau"] - 1) / k if spec else None,
        "mean_acceptance_length": p["tau"] if spec else None,
        "per_position_acceptance": p["acc"],
        "stats": {"output_tok_per_s": st(tps), "p99_tpot_ms": st(tpot * 1.3)},
        "score": {"output_tok_per_s": tps * 0.995, "p99_tpot_ms": tpot * 1.3 * 1.005},
    }


def write_chain_surface(path: Path, space_text: str = SPACE) -> Path:
    return write_rows(path, space_text, _metrics, "FAKE formula (chain model)", kv_tokens)


def trial_row(number: int, c: dict[str, Any], state: str = "complete", levels=(4,)) -> Any:
    """A stored trial as the guide reads it: the chain model's metrics at ``levels``."""
    from types import SimpleNamespace

    meas = [
        SimpleNamespace(workload="code_completion", concurrency=lv, metrics=_metrics(c, lv))
        for lv in levels
    ]
    return SimpleNamespace(
        number=number,
        params=c,
        state=state,
        measurements=meas,
        reused_from=None,
        lossless_match_rate=1.0,
        lossless_p_value=None,
        kv_cache_tokens=9999,
        search=None,
    )
