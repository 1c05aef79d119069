"""Chat traffic through a whole job, on the FAKE engine (its template is ``[role] content``
lines): the same prompts raw and through the chat template, each measurement saying which
endpoint it measured and how many prompt tokens the engine counted, and the baseline's
token sequences (what offline pricing reads) taken from the chat endpoint."""

from __future__ import annotations

from tests.helpers import run_fake_job
from tuner.space import loads_space
from tuner.storage import Store, TrialModel

SPACE = """
name: chat-job
engine: {model: target, served_model_name: fake, startup_timeout_s: 30}
methods:
  ngram: {num_speculative_tokens: {min: 1, max: 2}}
max_num_seqs: [4]
concurrency: [1]
workloads:
  - {name: chat, builtin: code_completion, raw: false, num_prompts: 4, max_tokens: 8,
     chat_template_kwargs: {enable_thinking: false}}
  - {name: raw, builtin: code_completion, num_prompts: 4, max_tokens: 8}
  - {name: conv, builtin: conversations, num_prompts: 4, max_tokens: 8, max_turns: 2}
measurement: {repeats: 2, confirm_top: 0, confirm_budget: 0, warmup: fixed}
lossless: {num_prompts: 2, max_tokens: 4}
trials: 2
"""


def test_chat_and_raw_workloads_measured_apart(space_dir, db_url, fake_launcher):
    space = loads_space(SPACE, base_dir=space_dir)
    job_id = run_fake_job(db_url, space, space_dir / "w", fake_launcher)
    with Store(db_url).session() as s:
        rows = s.query(TrialModel).filter_by(job_id=job_id).order_by(TrialModel.number).all()
        assert [r.state for r in rows] == ["complete", "complete"]
        points = {(r.number, m.workload): dict(m.metrics) for r in rows for m in r.measurements}
        base = rows[0]
        seqs = base.token_sequences
        rate = rows[1].lossless_match_rate
    for n in (0, 1):
        chat, raw, conv = (points[(n, w)] for w in ("chat", "raw", "conv"))
        assert (chat["endpoint"], raw["endpoint"], conv["endpoint"]) == (
            "chat",
            "completions",
            "chat",
        )
        # the same prompts: the template's tokens reached the engine
        assert chat["prompt_tokens_mean"] > raw["prompt_tokens_mean"] > 0
        assert chat["num_requests"] == raw["num_requests"]
        # half the conversations have a second turn: more requests than entries
        assert conv["num_requests"] > raw["num_requests"]
    # Offline pricing reads the first workload's ids, as the chat endpoint templated them.
    assert seqs and bytes(seqs[0][0][:7]) == b"[user] "
    assert all(len(out) == 8 + 2 and n == [8] for _, out, n in seqs)
    assert rate == 1.0  # the lossless check compared the chat prompts' greedy ids
