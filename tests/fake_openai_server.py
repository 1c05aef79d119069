"""FAKE OpenAI-compatible engine for unit tests only. It measures nothing real.

Speaks just enough of vLLM's server for SpecTune's client: ``/health``, streaming
``/v1/completions`` and ``/v1/chat/completions`` with ``usage`` (a prompt's tokens are its
bytes; chat messages go through a FAKE template, ``[role] content`` lines, so a chat prompt
counts more tokens than its text), and ``/metrics`` with vLLM's spec-decode counter names.
It accepts vLLM's command-line flags so the study can launch it in place of the real engine.
Behaviour knobs (flags of this fake, not vLLM's):

  --fake-acceptance P     fraction of draft tokens accepted (default 0.5)
  --fake-token-ms MS      time per engine step (default 1)
  --fake-drop-after N     close the stream after N chunks (simulates a crash mid-request)
  --fake-http-error CODE  answer every completion with this HTTP status
  --fake-exit-on-start    exit 1 at once, printing a vLLM-like OOM message
  --fake-lossy            with speculation, greedy token ids differ from the baseline's
  --fake-require-key KEY  answer completions 401 unless ``Authorization: Bearer KEY``
  --fake-tokens-per-chunk N  every streamed chunk carries N tokens (a batching server)
  --fake-empty-text-chunks N the first N chunks of an answer carry empty text (tokens that
                          print nothing yet, as a byte-level tokenizer mid-character does)

vLLM's ``--max-num-seqs N`` is honoured (FAKE scheduler, ``FakeEngine.scheduler``): at most N
``/v1/`` requests are served at once, the rest wait; the wait is exposed as vLLM's
``vllm:request_queue_time_seconds`` histogram (``_sum``/``_count``) in /metrics.

Non-streamed requests answer with ``token_ids`` (``return_token_ids``; greedy ones also with
``prompt_token_ids``, the prompt's bytes): greedy ones a
deterministic function of the prompt, so a baseline and a speculative fake agree unless
--fake-lossy; sampled ones (temperature > 0, ``n`` choices, sample i seeded ``seed + i``)
draw each token from a fixed distribution, which --fake-lossy with speculation skews.
``GET /fake/seen`` lists the sampling fields every completion request carried, and
``GET /fake/chats`` the messages of every chat request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

from aiohttp import web


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--served-model-name", default="fake")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--speculative-config")
    ap.add_argument("--fake-acceptance", type=float, default=0.5)
    ap.add_argument("--fake-token-ms", type=float, default=1.0)
    ap.add_argument("--fake-drop-after", type=int, default=0)
    ap.add_argument("--fake-http-error", type=int, default=0)
    ap.add_argument("--fake-exit-on-start", action="store_true")
    ap.add_argument("--fake-lossy", action="store_true")
    ap.add_argument("--fake-require-key")
    ap.add_argument("--fake-tokens-per-chunk", type=int, default=1)
    ap.add_argument("--fake-empty-text-chunks", type=int, default=0)
    ap.add_argument("--max-num-seqs", type=int, default=0)  # vLLM's flag: FAKE scheduler
    args, _unknown = ap.parse_known_args(argv)
    return args


class FakeEngine:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.spec = json.loads(args.speculative_config) if args.speculative_config else None
        self.k = int(self.spec["num_speculative_tokens"]) if self.spec else 0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.per_pos = [0] * self.k
        self.rng = random.Random(0)
        self.resets = 0
        self.seen: list[dict] = []  # sampling fields of every completion request
        self.chats: list[list[dict]] = []  # messages of every chat request
        # FAKE scheduler: --max-num-seqs slots; seconds waited for one, requests that took one.
        seqs = getattr(args, "max_num_seqs", 0)
        self.slots = asyncio.Semaphore(seqs) if seqs else None
        self.queue_s, self.queue_n = 0.0, 0

    @web.middleware
    async def scheduler(self, req: web.Request, handler) -> web.StreamResponse:
        """FAKE scheduler: a ``/v1/`` request waits for one of --max-num-seqs slots (a free
        slot is no wait) and holds it until its answer ends, as vLLM's running batch."""
        if self.slots is None or not req.path.startswith("/v1/"):
            return await handler(req)
        t0 = time.monotonic()
        busy = self.slots.locked()
        async with self.slots:
            self.queue_s += time.monotonic() - t0 if busy else 0.0
            self.queue_n += 1
            return await handler(req)

    def step(self) -> int:
        """One engine step: returns tokens committed (1 + accepted drafts)."""
        if not self.spec:
            return 1
        self.drafts += 1
        self.draft_tokens += self.k
        n = 0
        for i in range(self.k):
            if self.rng.random() < self.args.fake_acceptance:
                n += 1
                self.per_pos[i] += 1
            else:
                break
        self.accepted += n
        return 1 + n

    async def health(self, _req: web.Request) -> web.Response:
        return web.Response(text="")

    async def seen_sampling(self, _req: web.Request) -> web.Response:
        return web.json_response(self.seen)

    async def seen_chats(self, _req: web.Request) -> web.Response:
        return web.json_response(self.chats)

    @staticmethod
    def template(messages: list[dict]) -> str:
        """The FAKE chat template: a line a message, then the assistant's cue."""
        return "".join(f"[{m['role']}] {m['content']}\n" for m in messages) + "[assistant] "

    def sampled_ids(self, prompt: str, max_tokens: int, seed: int) -> list[int]:
        """One sampled continuation: token j is base + one of 4 offsets; a lossy speculative
        fake favours the first offset (the "draft's" choice) after the first token."""
        rng = random.Random(seed)
        base = sum(prompt.encode()) % 1000
        fair, skewed = [4, 3, 2, 1], [7, 1, 1, 1]
        lossy = bool(self.spec and self.args.fake_lossy)
        return [
            base + rng.choices(range(4), skewed if lossy and j else fair)[0]
            for j in range(max_tokens)
        ]

    async def reset_prefix_cache(self, _req: web.Request) -> web.Response:
        self.resets += 1
        return web.Response(text="")

    async def metrics(self, _req: web.Request) -> web.Response:
        lines = [
            "# HELP vllm:num_requests_running fake",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="fake"} 0.0',
        ]
        if self.slots is not None:
            q = 'engine="0",model_name="fake"'
            lines += [
                "# HELP vllm:request_queue_time_seconds FAKE scheduler's waits",
                "# TYPE vllm:request_queue_time_seconds histogram",
                f'vllm:request_queue_time_seconds_bucket{{{q},le="+Inf"}} {float(self.queue_n)}',
                f"vllm:request_queue_time_seconds_sum{{{q}}} {self.queue_s}",
                f"vllm:request_queue_time_seconds_count{{{q}}} {float(self.queue_n)}",
            ]
        if self.spec:
            lab = 'engine="0",model_name="fake"'
            for name, v in (
                ("num_drafts", self.drafts),
                ("num_draft_tokens", self.draft_tokens),
                ("num_accepted_tokens", self.accepted),
            ):
                lines += [
                    f"# HELP vllm:spec_decode_{name} fake",
                    f"# TYPE vllm:spec_decode_{name} counter",
                    f"vllm:spec_decode_{name}_total{{{lab}}} {float(v)}",
                    f"vllm:spec_decode_{name}_created{{{lab}}} 1.7e9",
                ]
            lines += [
                "# HELP vllm:spec_decode_num_accepted_tokens_per_pos fake",
                "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
            ]
            for i, v in enumerate(self.per_pos):
                lines.append(
                    f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},"
                    f'position="{i}"}} {float(v)}'
                )
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def chat_completions(self, req: web.Request) -> web.StreamResponse:
        body = await req.json()
        if len(self.chats) < 10_000:
            self.chats.append(body.get("messages") or [])
        body["max_tokens"] = body.get("max_completion_tokens", body.get("max_tokens", 16))
        return await self.completions(req, body, self.template(body.get("messages") or []))

    async def completions(
        self, req: web.Request, body: dict | None = None, chat: str | None = None
    ) -> web.StreamResponse:
        """Completions; a chat request (``chat``: its templated prompt) answers in chat's
        shapes: a role chunk first, ``delta.content``, ``message``, top-level prompt ids."""
        body = body if body is not None else await req.json()
        prompt = chat if chat is not None else body["prompt"]
        if isinstance(prompt, list):  # token ids (vLLM takes them as a prompt)
            prompt = bytes(t % 256 for t in prompt).decode("latin-1")
        prompt_tokens = len(prompt.encode())
        want = getattr(self.args, "fake_require_key", None)
        if want and req.headers.get("Authorization") != f"Bearer {want}":
            return web.json_response({"error": "invalid api key"}, status=401)
        if self.args.fake_http_error:
            return web.json_response({"error": "fake failure"}, status=self.args.fake_http_error)
        max_tokens = int(body.get("max_tokens", 16))
        keys = ("temperature", "top_p", "top_k", "min_p", "seed")
        if len(self.seen) < 10_000:
            self.seen.append({k: body[k] for k in keys if k in body})
        if not body.get("stream") and body.get("temperature"):
            n, seed = int(body.get("n", 1)), body.get("seed")
            choices = [
                {
                    "index": i,
                    "text": " tok" * max_tokens,
                    "token_ids": self.sampled_ids(
                        prompt,
                        max_tokens,
                        seed + i if seed is not None else random.getrandbits(32),
                    ),
                }
                for i in range(n)
            ]
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n * max_tokens}
            answer = {"choices": choices, "usage": usage}
            ids_asked = body.get("return_token_ids")
            if chat is not None:
                for c in choices:
                    c["message"] = {"role": "assistant", "content": c.pop("text")}
                if ids_asked:
                    answer["prompt_token_ids"] = [b % 4096 for b in prompt.encode()]
            elif ids_asked:
                for c in choices:
                    c["prompt_token_ids"] = [b % 4096 for b in prompt.encode()]
            return web.json_response(answer)
        if not body.get("stream"):
            seed = sum(prompt.encode()) % 1000
            ids = [(seed + i) % 4096 for i in range(max_tokens)]
            if self.spec and self.args.fake_lossy:
                ids = [(t + 1) % 4096 if i >= max_tokens // 2 else t for i, t in enumerate(ids)]
            choice = {"index": 0, "text": " tok" * max_tokens, "token_ids": ids}
            answer: dict = {"choices": [choice]}
            prompt_ids = [b % 4096 for b in prompt.encode()]
            if chat is not None:
                choice["message"] = {"role": "assistant", "content": choice.pop("text")}
                if body.get("return_token_ids"):
                    answer["prompt_token_ids"] = prompt_ids
            elif body.get("return_token_ids"):
                choice["prompt_token_ids"] = prompt_ids
            answer["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens}
            return web.json_response(answer)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        produced = chunks = 0
        role_sent = chat is None
        while produced < max_tokens:
            await asyncio.sleep(self.args.fake_token_ms / 1000.0)
            n = self.step()
            for _ in range(getattr(self.args, "fake_tokens_per_chunk", 1) - 1):
                n += self.step()
            n = min(n, max_tokens - produced)
            produced += n
            chunks += 1
            if self.args.fake_drop_after and chunks > self.args.fake_drop_after:
                # Abort the connection mid-stream, as a crashing engine would.
                assert req.transport is not None
                req.transport.close()
                return resp
            empty = getattr(self.args, "fake_empty_text_chunks", 0)  # the SGLang fake has none
            text = "" if chunks <= empty else " tok" * n
            choice: dict = {"index": 0, "text": text}
            if not role_sent:  # vLLM's chat: the role chunk, just before the first token's
                role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
                await resp.write(f"data: {json.dumps({'choices': [role]})}\n\n".encode())
                role_sent = True
            if chat is not None:
                choice = {"index": 0, "delta": {"content": text}}
            data = {"choices": [choice], "usage": None}
            await resp.write(f"data: {json.dumps(data)}\n\n".encode())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": produced,
            "total_tokens": prompt_tokens + produced,
        }
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.fake_exit_on_start:
        print(
            "ValueError: Available memory on node 0 (1.0/19.09 GiB) on startup is less than "
            "desired CPU memory utilization",
            flush=True,
        )
        sys.exit(1)
    eng = FakeEngine(args)
    app = web.Application(middlewares=[eng.scheduler])
    app.router.add_get("/health", eng.health)
    app.router.add_get("/metrics", eng.metrics)
    app.router.add_post("/reset_prefix_cache", eng.reset_prefix_cache)
    app.router.add_get("/fake/seen", eng.seen_sampling)
    app.router.add_get("/fake/chats", eng.seen_chats)
    app.router.add_post("/v1/completions", eng.completions)
    app.router.add_post("/v1/chat/completions", eng.chat_completions)
    print(f"fake engine on {args.host}:{args.port}", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
