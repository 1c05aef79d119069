"""Offline pricing through a whole guided job with the FAKE engine: the baseline stores its
prompt and output ids, every later speculative launch carries its offline acceptance (or why
it has none), ``trials --json`` shows it beside the measured one, and the report's section
says what was priced. tests/offline/test_offline_vllm.py checks the numbers on real vLLM."""

from __future__ import annotations

import json

from tests.fake_space import SPACE
from tests.helpers import fake_measurers
from tuner import cli
from tuner.job import create_job, run_job
from tuner.space import loads_space
from tuner.storage import Store, TrialModel


def test_a_guided_job_prices_its_proposers_on_the_baselines_outputs(
    space_dir, db_url, fake_launcher, capsys
):
    text = SPACE.format(drafts="good_draft", slo=1000, trials=4, confirm=0, search="guided")
    text = text.replace("{confirm_top: 0}", "{confirm_top: 0, max_relative_mad: 10}")
    space = loads_space(text, base_dir=space_dir)
    job_id = create_job(Store(db_url), space)
    run_job(
        Store(db_url), job_id, work_dir=space_dir / "w", measurers=fake_measurers(fake_launcher)
    )
    with Store(db_url).session() as s:
        base = s.query(TrialModel).filter_by(job_id=job_id, number=0).one()
        seqs = base.token_sequences
    assert seqs is not None and len(seqs) == 4  # one pass of the workload's prompts
    prompt, output, limit = seqs[0]
    assert prompt and len(output) == 12 + 3 and limit == [12]  # max_tokens + largest depth
    capsys.readouterr()
    assert cli.main(["trials", str(job_id), "--json", "--db", db_url]) == 0
    trials = json.loads(capsys.readouterr().out)
    spec = [t for t in trials if t["method"] not in (None, "none") and t["state"] != "fail"]
    assert spec
    for t in spec:
        note = t["search"]["offline"]
        if t["method"] == "ngram":
            # The FAKE's greedy ids never repeat: vLLM's lookup finds nothing to draft.
            assert t["offline_acceptance_rate"] == 0.0 and "basis" in note
            assert (
                len(t["offline_per_position_acceptance"]) == t["params"]["num_speculative_tokens"]
            )
        else:
            assert t["offline_acceptance_rate"] is None
            assert "did not load" in note["unpriced"]  # a FAKE draft path
    assert cli.main(["report", str(job_id), "--db", db_url]) in (0, 3)
    out = capsys.readouterr().out
    assert "Offline acceptance (per position" in out or "not priced offline" in out
