"""FAKE vLLM server for the watch tests: it serves scripted ``/metrics`` snapshots (vLLM's
metric names, made-up numbers) and a ``/v1/models`` list. Nothing here is measured.

Each GET /metrics answers the next snapshot of the script and then keeps answering the last,
so a window's first and last scrapes see exactly the counters the test wrote; a ``None`` in
the script answers that scrape 503 (a server restarting).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Snap:
    """One FAKE snapshot: counters since the fake server's start, and the gauges now."""

    drafts: float = 0
    draft_tokens: float = 0
    accepted: float = 0
    per_pos: Sequence[float] = field(default_factory=list)
    running: float = 1
    waiting: float = 0
    memory: float | None = 0.4
    spec: bool = True
    started_at: float | None = None

    def text(self, name: str) -> str:
        lab = f'engine="0",model_name="{name}"'
        out = [
            "# HELP vllm:num_requests_running FAKE",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {float(self.running)}",
            "# HELP vllm:num_requests_waiting FAKE",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} {float(self.waiting)}",
        ]
        if self.started_at is not None:
            out += [
                "# HELP process_start_time_seconds FAKE",
                "# TYPE process_start_time_seconds gauge",
                f"process_start_time_seconds {self.started_at}",
            ]
        if self.memory is not None:
            out += [
                "# HELP vllm:cache_config_info FAKE",
                "# TYPE vllm:cache_config_info gauge",
                f'vllm:cache_config_info{{block_size="16",engine="0",'
                f'gpu_memory_utilization="{self.memory}"}} 1.0',
            ]
        if not self.spec:
            return "\n".join(out) + "\n"
        for key, v in (
            ("num_drafts", self.drafts),
            ("num_draft_tokens", self.draft_tokens),
            ("num_accepted_tokens", self.accepted),
        ):
            out += [
                f"# HELP vllm:spec_decode_{key} FAKE",
                f"# TYPE vllm:spec_decode_{key} counter",
                f"vllm:spec_decode_{key}_total{{{lab}}} {float(v)}",
                f"vllm:spec_decode_{key}_created{{{lab}}} 1.7e9",
            ]
        out += [
            "# HELP vllm:spec_decode_num_accepted_tokens_per_pos FAKE",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        ]
        out += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} '
            f"{float(v)}"
            for i, v in enumerate(self.per_pos)
        ]
        return "\n".join(out) + "\n"


def snap_after(before: Snap, drafts: int, per_pos_rates: Sequence[float], **kw) -> Snap:
    """``before`` plus ``drafts`` drafts of depth len(per_pos_rates) accepted at those
    per-position rates (FAKE counts built to known ratios)."""
    k = len(per_pos_rates)
    add = [round(drafts * r) for r in per_pos_rates]
    return Snap(
        drafts=before.drafts + drafts,
        draft_tokens=before.draft_tokens + drafts * k,
        accepted=before.accepted + sum(add),
        per_pos=[a + b for a, b in zip(before.per_pos or [0] * k, add, strict=True)],
        **kw,
    )


class FakeVLLMMetrics:
    """The FAKE server's script and what it has answered."""

    def __init__(
        self, script: Sequence[Snap | None], name: str = "fake", root: str = "/m"
    ) -> None:
        self.script, self.name, self.root = list(script), name, root
        self.served = 0
        self.lock = threading.Lock()

    def next_text(self) -> str | None:
        with self.lock:
            snap = self.script[min(self.served, len(self.script) - 1)]
            self.served += 1
        return None if snap is None else snap.text(self.name)


@contextmanager
def fake_vllm(script: Sequence[Snap | None], **kw) -> Iterator[tuple[str, FakeVLLMMetrics]]:
    """(base URL, the fake) of a FAKE vLLM /metrics server on a free port."""
    fake = FakeVLLMMetrics(script, **kw)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                text = fake.next_text()
                if text is None:
                    self.send_error(503)
                    return
                body, kind = text.encode(), "text/plain; version=0.0.4"
            elif self.path == "/v1/models":
                data = [{"id": fake.name, "root": fake.root, "max_model_len": 512}]
                body, kind = (
                    json.dumps({"object": "list", "data": data}).encode(),
                    "application/json",
                )
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", fake
    finally:
        srv.shutdown()
        srv.server_close()
