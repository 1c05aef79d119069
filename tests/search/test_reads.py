"""The search reads a job's trials once per trial: proposing, choosing the class member and
pricing the launch share one read, taken again only when the job's trials changed. On the
FAKE chain-model surface (tests/search/chain_surface.py): nothing here was measured."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.search.chain_surface import write_chain_surface
from tuner.context import JobContext
from tuner.job import create_job, run_job
from tuner.search import SearchStrategy
from tuner.space import parse_space
from tuner.storage import Store
from tuner.surface import read_surface

# The first scan's proposer (EAGLE at k=6): its other depths are priced.
HEAD = {"method": "eagle", "head": "head", "max_num_seqs": 4, "memory_fraction": 0.4}


def _guided_job(root: Path, url: str, trials: int) -> int:
    surface = write_chain_surface(root / "chain.jsonl")
    data = read_surface(surface).space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(surface)}
    data.update(trials=trials)
    return create_job(Store(url), parse_space(data, base_dir=root))


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    """Every ``Store.trials`` call: (calling module, keyword arguments)."""
    calls: list[tuple[str, dict]] = []
    real = Store.trials

    def counting(self, job_id, **kw):
        calls.append((sys._getframe(1).f_globals["__name__"], kw))
        return real(self, job_id, **kw)

    monkeypatch.setattr(Store, "trials", counting)
    return calls


def test_one_read_serves_a_trials_proposal_class_and_prediction(tmp_path, db_url, monkeypatch):
    store = Store(db_url)
    jid = _guided_job(tmp_path, db_url, trials=2)  # the baseline and the first scan
    run_job(store, jid, work_dir=tmp_path / "work")
    strategy = SearchStrategy(JobContext.reading(store, jid))
    study = store.load_study(jid)
    calls = _count_reads(monkeypatch)

    prop = strategy.propose(study)  # before the trial
    assert prop is not None and prop.by.startswith("guide")
    params, _ = strategy.canonical(prop.params)  # inside it
    strategy.prediction_for(params)
    assert strategy.prediction_for({**HEAD, "num_speculative_tokens": 3}) is not None
    assert strategy.predictions()
    assert len(calls) == 1, calls

    # The trial's own row changes the job's trials: the next question reads again, once.
    store.add_trial(
        jid, 2, method=params["method"], params=params, engine_config={}, engine_key="k"
    )
    strategy.canonical(params)
    strategy.prediction_for(params)
    assert len(calls) == 2, calls
    # ... and so does its result (a state written).
    [row] = [r for r in store.trials(jid) if r.number == 2]
    calls.clear()
    store.finish_trial(row.trial_id, "fail", reason="crash")
    strategy.canonical(params)
    strategy.prediction_for(params)
    assert len(calls) == 1, calls


def test_a_guided_job_reads_its_trials_once_per_trial(tmp_path, db_url, monkeypatch):
    """Outside pruning (which reads the complete trials afresh once, at the objective
    point), the search reads the job's trials once per trial (it read them three times),
    and once more after the last one: the outlook that says why the search stopped."""
    trials = 6
    jid = _guided_job(tmp_path, db_url, trials=trials)
    calls = _count_reads(monkeypatch)
    run_job(Store(db_url), jid, work_dir=tmp_path / "work")
    search = [kw for mod, kw in calls if mod.startswith("tuner.search")]
    snapshot = [kw for kw in search if not kw]
    pruning = [kw for kw in search if kw]
    assert 0 < len(snapshot) <= trials + 1, search
    assert len(pruning) <= trials, search
