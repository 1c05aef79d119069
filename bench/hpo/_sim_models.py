"""Two simulators of speculative decoding on GPUs, of DIFFERENT FORMS, for simulated surfaces.

Why two forms: a search must not win by knowing one simulator's formula. ``Roofline``
prices a step from bytes moved and FLOPs (memory- vs compute-bound) and draws acceptance
from a geometric law; ``Linear`` prices a step with a fitted linear cost in batched tokens
and context, and reads acceptance from per-position tables. Both are SIMULATIONS calibrated
to published measurements (``CITATIONS``); ``checks`` prints simulated vs published numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Config = dict[str, Any]

CITATIONS = {
    "eagle3": "Li et al., EAGLE-3, arXiv:2503.01840 (SGLang, 1x H100, LLaMA-3.1-8B-Instruct, "
    "MT-bench, batch 1: 158.34 tok/s w/o speculation, 244.10 EAGLE-2, 373.25 EAGLE-3; "
    "EAGLE-3 1.38x throughput at batch 64)",
    "specdecode_bench": "SpecDecode-Bench, 'Speculative Decoding: Performance or Illusion?', "
    "arXiv:2601.11580, https://specdecode-bench.github.io (vLLM, H100, batch 1-128: speedups "
    "shrink with batch; verification is 42-95% of time; EAGLE-3 best all-round; n-gram wins on "
    "high-overlap tasks; acceptance varies by position, request and dataset)",
    "deepseek_v3": "DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437 sec. 5.4.3 "
    "(MTP second-token acceptance 85-90%, 1.8x TPS)",
    "vllm_eagle3_gptoss": "aimosprite/inference-bench-results, eagle3_tree_validate/notes.md "
    "(vLLM 0.17.1, 1x H100, gpt-oss-120b + EAGLE-3, batch 8: per-position acceptance "
    "0.58 0.31 0.16 0.08 0.04 0.02 0.01 0.00; speedup 1.19/1.21/1.25/1.15/1.04 at depth "
    "2/3/4/6/8)",
    "gpustack_qwen3_8b": "GPUStack performance lab, Qwen3-8B on H100 "
    "(docs.gpustack.ai/latest/performance-lab/qwen3-8b/h100-latency: EAGLE-3 2.7x at batch 1, "
    "2.4x at 2, 2.2x at 4, 1.6x at 8)",
    "leviathan": "Leviathan et al., arXiv:2211.17192: E[tokens/step] = 1 + sum of per-position "
    "acceptance (geometric: (1 - a^(k+1)) / (1 - a))",
    "h100": "NVIDIA H100 SXM datasheet: 80 GB HBM3, 3.35 TB/s, 989 TFLOP/s dense BF16",
}


@dataclass(frozen=True)
class Workload:
    name: str
    prompt_tokens: int
    output_tokens: int


@dataclass
class Sim:
    """What both forms share: memory, KV capacity, and the request-level queueing model."""

    name: str
    hbm_gb: float
    max_model_len: int
    weights_gb: float  # target weights per GPU
    kv_bytes: float  # target KV per token per GPU
    drafts: dict[str, dict[str, float]] = field(default_factory=dict)  # path -> facts

    def proposer(self, c: Config) -> dict[str, float]:
        key = c.get("draft") or c.get("head") or c["method"]
        return self.drafts.get(key, {})

    def act_gb(self, c: Config) -> float:
        """Activation / CUDA-graph reserve: grows with max_num_seqs."""
        return 1.0 + c["max_num_seqs"] / 200.0

    def kv_tokens(self, c: Config) -> float:
        d = self.proposer(c)
        free = c["memory_fraction"] * self.hbm_gb - self.weights_gb - d.get("weights_gb", 0.0)
        free -= self.act_gb(c)
        return max(0.0, free) * 1e9 / (self.kv_bytes + d.get("kv_bytes", 0.0))

    def startup_s(self, c: Config) -> float:
        d = self.proposer(c)
        return self.base_startup_s + 6.0 * c["max_num_seqs"] / 256 + d.get("load_s", 0.0)

    base_startup_s: float = 60.0

    # The form-specific parts.
    def accept(self, c: Config) -> list[float]:
        raise NotImplementedError

    def step_ms(self, c: Config, batch: int, ctx: float) -> float:
        raise NotImplementedError

    def prefill_ms(self, c: Config, tokens: int) -> float:
        raise NotImplementedError

    def point(self, c: Config, wl: Workload, level: int) -> dict[str, float]:
        """Noise-free metrics of one (configuration, concurrency), closed-loop arrivals."""
        k = int(c.get("num_speculative_tokens") or 0) if c["method"] != "none" else 0
        acc = self.accept(c)[:k] if k else []
        tau = 1.0 + sum(acc)
        P, out_t = wl.prompt_tokens, wl.output_tokens
        per_req = P + out_t + k
        cap = self.kv_tokens(c)
        running = max(1, min(level, int(cap // per_req)))
        preempt = max(1.0, level * per_req / cap) if cap > 0 else 99.0
        t_step = self.step_ms(c, running, P + out_t / 2)
        t_pre = self.prefill_ms(c, P)
        cycle = running * t_pre + (out_t / tau) * t_step  # ms for `running` requests to finish
        cycle *= 1.0 + 0.35 * (preempt - 1.0)  # recomputation after preemption
        tok_s = running * out_t / (cycle / 1000.0)
        mean_tpot = ((running - 1) * t_pre + (out_t / tau) * t_step) / out_t
        tail = (1.15 + 0.035 * k) * (1.0 + 2.0 * (preempt - 1.0))
        wait = (level / running - 1.0) * cycle
        ttft = t_pre + wait
        out = {
            "output_tok_per_s": tok_s,
            "mean_tpot_ms": mean_tpot,
            "p50_tpot_ms": mean_tpot * 0.97,
            "p90_tpot_ms": mean_tpot * (1 + (tail - 1) * 0.6),
            "p99_tpot_ms": mean_tpot * tail,
            "mean_itl_ms": t_step,
            "p50_itl_ms": t_step,
            "p90_itl_ms": t_step * 1.1 + (t_pre if running > 1 else 0) * 0.3,
            "p99_itl_ms": t_step * 1.25 + (t_pre if running > 1 else 0),
            "mean_ttft_ms": ttft,
            "p50_ttft_ms": ttft * 0.95,
            "p90_ttft_ms": ttft * 1.3,
            "p99_ttft_ms": ttft * 1.6 + (t_pre if running > 1 else 0),
            "tau": tau,
            "kv_tokens": cap,
        }
        out["mean_e2e_ms"] = ttft + out_t * mean_tpot
        out["acceptance"] = acc  # type: ignore[assignment]
        return out


@dataclass
class Roofline(Sim):
    """Step = max(bytes / bandwidth, FLOPs / peak) + a fixed launch overhead, per forward;
    acceptance geometric: position i accepted with probability a1 * beta^(i-1)."""

    bw: float = 3.35e12 * 0.85  # achieved HBM bandwidth, B/s
    flops: float = 989e12 * 0.3  # achieved dense BF16 on decode-shaped GEMMs
    params: float = 8.03e9
    overhead_ms: float = 1.0
    geo: dict[str, tuple[float, float]] = field(default_factory=dict)  # key -> (a1, beta)

    def accept(self, c: Config) -> list[float]:
        if c["method"] == "ngram":
            a1, beta = self.geo[f"ngram{c['prompt_lookup_min']}"]
            a1 += 0.02 * (c["prompt_lookup_max"] - 3)
        else:
            a1, beta = self.geo[c.get("draft") or c.get("head") or c["method"]]
        return [a1 * beta ** (i - 1) for i in range(1, 9)]

    def _fwd(
        self, w_bytes: float, params: float, kvb: float, batch: int, q: int, ctx: float
    ) -> float:
        mem = (w_bytes + batch * ctx * kvb) / self.bw
        comp = 2 * params * batch * q / self.flops
        return 1000 * max(mem, comp)

    def step_ms(self, c: Config, batch: int, ctx: float) -> float:
        k = int(c.get("num_speculative_tokens") or 0) if c["method"] != "none" else 0
        t = self._fwd(self.weights_gb * 1e9, self.params, self.kv_bytes, batch, k + 1, ctx)
        t += self.overhead_ms + 0.004 * batch * (k + 1)  # sampler / rejection bookkeeping
        d = self.proposer(c)
        if c["method"] == "ngram":
            t += 0.2 + 0.02 * batch  # CPU lookup
        elif k:
            one = self._fwd(d["weights_gb"] * 1e9, d["params"], d["kv_bytes"], batch, 1, ctx)
            t += k * (one + d["overhead_ms"])
        return t

    def prefill_ms(self, c: Config, tokens: int) -> float:
        d = self.proposer(c)
        p = self.params + (d.get("params", 0.0) if c["method"] != "ngram" else 0.0)
        return 1000 * 2 * p * tokens / (self.flops * 1.6) + self.overhead_ms


@dataclass
class Linear(Sim):
    """Step = a + b * (batch * tokens verified) + c * (batch * context/1000) per forward,
    coefficients fitted by hand to the published numbers; acceptance from per-position tables
    (cumulative: P(position i accepted)), any shape, not geometric."""

    a_ms: float = 7.5
    b_ms: float = 0.09
    c_ms: float = 0.012
    prefill_a_ms: float = 4.0
    prefill_b_ms: float = 0.09
    tables: dict[str, list[float]] = field(default_factory=dict)

    def accept(self, c: Config) -> list[float]:
        if c["method"] == "ngram":
            t = self.tables[f"ngram{c['prompt_lookup_min']}"]
            bonus = 0.015 * (c["prompt_lookup_max"] - 3)
            return [min(0.99, x + bonus) for x in t]
        return self.tables[c.get("head") or c.get("draft") or c["method"]]

    def step_ms(self, c: Config, batch: int, ctx: float) -> float:
        k = int(c.get("num_speculative_tokens") or 0) if c["method"] != "none" else 0
        t = self.a_ms + self.b_ms * batch * (k + 1) + self.c_ms * batch * ctx / 1000
        d = self.proposer(c)
        if c["method"] == "ngram":
            t += 0.15 + 0.003 * batch
        elif k:
            t += k * (d["a_ms"] + d["b_ms"] * batch)
        return t

    def prefill_ms(self, c: Config, tokens: int) -> float:
        extra = self.proposer(c).get("prefill_frac", 0.0) if c["method"] != "ngram" else 0.0
        return (self.prefill_a_ms + self.prefill_b_ms * tokens) * (1 + extra)


def decode_speedup(sim: Sim, c: Config, batch: int, ctx: float) -> float:
    """Decode-only speedup over no speculation (what batch-1 papers report)."""
    k = int(c.get("num_speculative_tokens") or 0)
    tau = 1.0 + sum(sim.accept(c)[:k])
    base = sim.step_ms({**c, "method": "none"}, batch, ctx)
    return tau * base / sim.step_ms(c, batch, ctx)
