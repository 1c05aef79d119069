"""FAKE SGLang server for contract tests only. It measures nothing real.

SGLang's kernels need CUDA, so its launch path is tested against this stand-in, which takes
``sglang.launch_server``'s flags and answers with the shapes SGLang's server uses (recorded
from its source): ``/health``, ``/v1/completions`` (streamed), native ``/generate`` (greedy
``output_ids``), ``/flush_cache``, ``/server_info`` (``internal_states[0].avg_spec_accept_length``)
and ``/metrics`` with the gauges ``sglang:spec_accept_length`` / ``sglang:spec_accept_rate``
(only with ``--enable-metrics``, as in SGLang).

It refuses what SGLang refuses: an inconsistent steps / top-k / draft-tokens triple (with top-k
1, draft tokens must be steps + 1), an unknown ``--speculative-algorithm``, and
``--speculative-adaptive`` other than on EAGLE's chain, or with a config file whose candidate
steps (per batch size, as SGLang's later releases read it) leave out ``--speculative-num-steps``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import FakeEngine  # noqa: E402

ALGORITHMS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--served-model-name", default="fake")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--context-length", type=int)
    ap.add_argument("--max-running-requests", type=int)
    ap.add_argument("--mem-fraction-static", type=float)
    ap.add_argument("--cuda-graph-max-bs", type=int)
    ap.add_argument("--dtype")
    ap.add_argument("--enable-metrics", action="store_true")
    ap.add_argument("--speculative-algorithm")
    ap.add_argument("--speculative-draft-model-path")
    ap.add_argument("--speculative-num-steps", type=int)
    ap.add_argument("--speculative-eagle-topk", type=int)
    ap.add_argument("--speculative-num-draft-tokens", type=int)
    ap.add_argument("--speculative-ngram-min-match-window-size", type=int)
    ap.add_argument("--speculative-ngram-max-match-window-size", type=int)
    ap.add_argument("--speculative-adaptive", action="store_true")
    ap.add_argument("--speculative-adaptive-config")
    ap.add_argument("--fake-acceptance", type=float, default=0.6)
    ap.add_argument("--fake-token-ms", type=float, default=1.0)
    return ap.parse_args(argv)


def check(a: argparse.Namespace) -> str | None:
    alg = a.speculative_algorithm
    if alg is None:
        return None
    if alg not in ALGORITHMS:
        return f"ValueError: unknown --speculative-algorithm {alg}"
    if alg == "NGRAM":
        return None if a.speculative_num_draft_tokens else "NGRAM needs num draft tokens"
    if a.speculative_eagle_topk == 1 and a.speculative_num_draft_tokens != (
        (a.speculative_num_steps or 0) + 1
    ):
        return "ValueError: speculative_num_draft_tokens must be num_steps + 1 when topk is 1"
    if alg in ("EAGLE", "EAGLE3", "STANDALONE") and not a.speculative_draft_model_path:
        return f"ValueError: {alg} needs --speculative-draft-model-path"
    if a.speculative_adaptive:
        return _adaptive_problem(a)
    return None


def _adaptive_problem(a: argparse.Namespace) -> str | None:
    if a.speculative_algorithm not in ("EAGLE", "EAGLE3") or a.speculative_eagle_topk != 1:
        return "speculative_adaptive: EAGLE/EAGLE3 with topk 1 only"
    if a.speculative_adaptive_config is None:
        return None  # SGLang's own default steps
    cfg = json.loads(Path(a.speculative_adaptive_config).read_text())
    entries = [v for k, v in cfg.items() if k.isdigit()]
    if not entries:
        return "ValueError: speculative_adaptive_config must contain at least one BS key"
    steps = {s for e in entries for s in e["candidate_steps"]}
    if a.speculative_num_steps not in steps:
        return f"ValueError: --speculative-num-steps={a.speculative_num_steps} is not in {steps}"
    return None


def main() -> None:
    a = parse(sys.argv[1:])
    err = check(a)
    if err:
        print(err, flush=True)
        sys.exit(1)
    k = (a.speculative_num_draft_tokens or 1) - 1 if a.speculative_algorithm else 0
    spec = {"method": a.speculative_algorithm, "num_speculative_tokens": k} if k else None
    ns = argparse.Namespace(
        speculative_config=json.dumps(spec) if spec else None,
        fake_acceptance=a.fake_acceptance,
        fake_token_ms=a.fake_token_ms,
        fake_drop_after=0,
        fake_http_error=0,
        fake_lossy=False,
    )
    eng = FakeEngine(ns)

    def accept_length() -> float:
        return 1.0 + eng.accepted / eng.drafts if eng.drafts else 0.0

    async def metrics(_req: web.Request) -> web.Response:
        if not a.enable_metrics:
            return web.Response(status=404, text="metrics disabled")
        rate = eng.accepted / eng.draft_tokens if eng.draft_tokens else 0.0
        lab = f'model_name="{a.served_model_name}",engine_type="unified",tp_rank="0"'
        lines = [
            "# HELP sglang:num_running_reqs The number of running requests.",
            "# TYPE sglang:num_running_reqs gauge",
            f"sglang:num_running_reqs{{{lab}}} 0.0",
            "# HELP sglang:spec_accept_length The average acceptance length of speculative "
            "decoding.",
            "# TYPE sglang:spec_accept_length gauge",
            f"sglang:spec_accept_length{{{lab}}} {accept_length()}",
            "# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.",
            "# TYPE sglang:spec_accept_rate gauge",
            f"sglang:spec_accept_rate{{{lab}}} {rate}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def server_info(_req: web.Request) -> web.Response:
        st = {"avg_spec_accept_length": accept_length()} if spec else {}
        return web.json_response(
            {
                "model_path": a.model_path,
                "internal_states": [st],
                "speculative_algorithm": a.speculative_algorithm,
            }
        )

    def one(text: str, sp: dict) -> dict:
        n = int(sp["max_new_tokens"])
        base = sum(text.encode()) % 1000
        if sp.get("temperature"):  # sampled: one of 4 offsets per token, seeded
            rng = random.Random(sp.get("sampling_seed"))
            ids = [base + rng.choices(range(4), [4, 3, 2, 1])[0] for _ in range(n)]
        else:
            ids = [(base + i) % 4096 for i in range(n)]
        return {"text": " tok" * n, "output_ids": ids, "meta_info": {"completion_tokens": n}}

    async def generate(req: web.Request) -> web.Response:
        body = await req.json()
        if isinstance(body["text"], list):  # a batch: one answer per text
            return web.json_response(
                [one(t, sp) for t, sp in zip(body["text"], body["sampling_params"], strict=True)]
            )
        return web.json_response(one(body["text"], body["sampling_params"]))

    async def flush(_req: web.Request) -> web.Response:
        eng.resets += 1
        return web.Response(text="Cache flushed.")

    app = web.Application()
    app.router.add_get("/health", eng.health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/server_info", server_info)
    app.router.add_post("/generate", generate)
    app.router.add_post("/flush_cache", flush)
    app.router.add_post("/v1/completions", eng.completions)
    print(f"fake sglang on {a.host}:{a.port}", flush=True)
    web.run_app(app, host=a.host, port=a.port, print=None)


if __name__ == "__main__":
    main()
