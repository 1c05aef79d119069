"""Offline acceptance against the real engine (vLLM CPU, the tiny in-repo pair): the
baseline's own greedy outputs, priced offline, against the per-position acceptance vLLM's
counters give when the same prompts are served speculatively (greedy, concurrency 1).

Three launches of about 30 s each. Within 0.03 (absolute) at every position for n-gram and
the draft model (the issue's bar); n-gram replays vLLM's rule on the engine's own tokens.
The chat case sends two-turn conversations through the tiny target's chat template: the
baseline's templated ids of every turn (the second carrying the model's own first reply)
price n-gram, against the counters of the same conversations served speculatively."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers import TINY, vllm_available
from tuner.engines import EngineConfig, VLLMServer
from tuner.loadgen import _Req, run_requests
from tuner.offline import TokenSequence, price_proposers
from tuner.workloads import Prompt, builtin_path, read_jsonl

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed"),
    pytest.mark.timeout(900),
]

MAX_TOKENS, K = 64, 4
NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": K,
    "prompt_lookup_min": 1,
    "prompt_lookup_max": 4,
}
DRAFT = {"method": "draft_model", "num_speculative_tokens": K, "model": str(TINY / "draft")}


def _server(tmp_path, spec: dict[str, Any] | None, name: str, model: str = "target") -> VLLMServer:
    cfg = EngineConfig(
        model=f"{TINY}/{model}",
        served_model_name="tiny",
        max_model_len=512,
        max_num_seqs=4,
        memory_fraction=0.1,
        speculative_config=spec,
        enforce_eager=True,
    )
    return VLLMServer(cfg, tmp_path / f"{name}.log", cache_root=tmp_path / "cache")


def _served(srv: VLLMServer, prompts: list[Prompt]) -> list[float]:
    async def go():
        async with srv.probe.window(srv.base_url) as reading:
            got, _ = await run_requests(
                srv.base_url, "tiny", [_Req(p, MAX_TOKENS) for p in prompts], 1, 120
            )
        assert all(r.ok for r in got), [r.error for r in got]
        return reading.spec

    spec = asyncio.run(go())
    assert spec is not None and spec.num_drafts > 0
    return list(spec.per_position_acceptance)


def _check(name: str, offline: Any, engine: list[float]) -> None:
    print(name, "offline", [round(x, 3) for x in offline], "engine", [round(x, 3) for x in engine])
    assert len(engine) == K
    for i, (o, e) in enumerate(zip(offline, engine, strict=True)):
        assert abs(o - e) <= 0.03, (name, i + 1, o, e)


def _baseline(
    tmp_path, prompts: list[Prompt], model: str = "target", name: str = "base"
) -> list[TokenSequence]:
    with _server(tmp_path, None, f"{name}-{model}", model) as srv:
        got = asyncio.run(
            srv.probe.token_sequences(
                srv.base_url, "tiny", prompts, [MAX_TOKENS] * len(prompts), K
            )
        )
    assert all(g is not None for g in got)
    return [TokenSequence(tuple(p), tuple(o), n) for turns in got for p, o, n in turns]  # type: ignore[union-attr]


def _code(n: int = 12) -> list[Prompt]:
    return read_jsonl(builtin_path("code_completion"))[:n]


def test_offline_acceptance_matches_vllms_counters(tmp_path):
    prompts = _code()
    seqs = _baseline(tmp_path, prompts)
    prices = price_proposers(
        {"ngram": NGRAM, "draft": {**DRAFT, "draft": str(TINY / "draft")}},
        seqs,
        MAX_TOKENS,
        max_model_len=512,
    )
    assert prices.seconds < 30, "under a tenth of a launch on the default"
    for name, spec in (("ngram", NGRAM), ("draft", DRAFT)):
        with _server(tmp_path, spec, name) as srv:
            _check(name, prices.get(name, K).per_position_acceptance, _served(srv, prompts))


def test_chat_conversations_priced_on_their_templated_ids(tmp_path):
    """Two-turn conversations through the tiny target's chat template: the baseline's ids
    are the engine's templated ones (longer than the raw text's), every turn priced."""
    code = _code(12)
    chats = [
        Prompt("", None, (("user", a.prompt),), (b.prompt,))
        for a, b in zip(code[:6], code[6:], strict=True)
    ]
    seqs = _baseline(tmp_path, chats, name="chat")
    assert len(seqs) == 12  # two turns each
    raw = _baseline(tmp_path, code[:6])
    assert all(len(c.prompt) > len(r.prompt) for c, r in zip(seqs[::2], raw, strict=True))
    prices = price_proposers({"ngram": NGRAM}, seqs, MAX_TOKENS, max_model_len=512)
    with _server(tmp_path, NGRAM, "ngram-chat") as srv:
        _check("ngram chat", prices.get("ngram", K).per_position_acceptance, _served(srv, chats))


EAGLE = {"method": "eagle", "num_speculative_tokens": K, "model": str(TINY / "eagle")}
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": K, "model": str(TINY / "eagle3")}
MTP = {"method": "mtp", "num_speculative_tokens": K}
MEDUSA = {"method": "medusa", "num_speculative_tokens": K, "model": str(TINY / "medusa")}


def test_heads_offline_acceptance_against_vllms_counters(tmp_path):
    """EAGLE, EAGLE-3, Medusa (on the target's baseline) and MiMo MTP (on its own
    checkpoint's baseline), offline against the engine. Measured 2026-12-06: largest error
    0.013 (EAGLE), 0.003 (EAGLE-3), 0.019 (Medusa), 0.010 (MTP) at any position; float32
    offline against the engine's bfloat16, so near-ties break either way. The bar is the
    issue's 0.03."""
    prompts = _code()
    cases = []
    seqs = _baseline(tmp_path, prompts, "target")
    heads = {
        "eagle": {**EAGLE, "head": EAGLE["model"]},
        "eagle3": {**EAGLE3, "head": EAGLE3["model"]},
        "medusa": {**MEDUSA, "head": MEDUSA["model"]},
    }
    prices = price_proposers(heads, seqs, MAX_TOKENS, target=str(TINY / "target"))
    assert prices.unpriced == {} and prices.seconds < 30
    cases += [("eagle", EAGLE, "target", prices), ("eagle3", EAGLE3, "target", prices)]
    cases.append(("medusa", MEDUSA, "target", prices))
    seqs = _baseline(tmp_path, prompts, "target-mtp")
    mtp = price_proposers({"mtp": MTP}, seqs, MAX_TOKENS, target=str(TINY / "target-mtp"))
    assert mtp.unpriced == {}
    cases.append(("mtp", MTP, "target-mtp", mtp))
    for name, spec, model, p in cases:
        with _server(tmp_path, spec, name, model) as srv:
            _check(name, p.get(name, K).per_position_acceptance, _served(srv, prompts))
