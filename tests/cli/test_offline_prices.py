"""The report prints every proposer the job priced offline, launched or not: the prices are
kept with the job (``spectune_jobs.offline_prices``) when the search computes them. A replay
of the recorded tiny-cpu surface (its own offline table; nothing is launched)."""

from __future__ import annotations

import json
from pathlib import Path

from tuner import cli
from tuner.job import create_job, run_job
from tuner.search import family_key
from tuner.space import parse_space
from tuner.storage import Store
from tuner.surface import read_surface

SURFACE = Path(__file__).resolve().parents[2] / "bench" / "surfaces" / "tiny-cpu.jsonl"


def test_every_priced_proposer_is_in_the_report_launched_or_not(tmp_path, capsys):
    data = read_surface(SURFACE).space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(SURFACE)}
    data.update(trials=4)
    url = f"sqlite:///{tmp_path / 'spectune.db'}"
    store = Store(url)
    store.ensure_schema()
    jid = create_job(store, parse_space(data, base_dir=SURFACE.parent))
    run_job(store, jid, work_dir=tmp_path / "work")

    kept = store.job(jid).offline_prices
    table = json.loads(SURFACE.read_text().splitlines()[0])["offline_acceptance"]
    assert kept is not None and set(kept["by_proposer"]) == set(table["by_proposer"])
    launched = {family_key(r.params) for r in store.trials(jid) if r.params["method"] != "none"}
    never = set(kept["by_proposer"]) - launched
    assert launched and never  # 4 trials cannot launch all five proposers

    assert cli.main(["report", str(jid), "--db", url]) == 0
    out = capsys.readouterr().out
    section = out.split("Offline prices (every proposer")[1].split("\n\n")[0]
    lines = [ln for ln in section.splitlines() if ln.startswith(("ngram", "draft_model"))]
    assert len(lines) == len(kept["by_proposer"])
    assert sum(ln.rstrip().endswith("not launched") for ln in lines) == len(never)
    assert "predictions, not measurements" in section
