"""Recorded surfaces and the replay backend.

A surface is recorded here from a job on the FAKE engine (for speed; bench/record_surface.py
records the real one from vLLM) and replayed: the replay must answer exactly the recorded
numbers, label them, launch nothing and refuse to export.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import fake_measurers, trial_records
from tuner import cli
from tuner.export import ExportError, export_job
from tuner.job import create_job, run_job
from tuner.pareto import job_report
from tuner.space import SpaceError, load_space, loads_space
from tuner.storage import JobModel, JobNotFound, Store, TrialModel
from tuner.surface import (
    FORMAT,
    SurfaceError,
    config_key,
    grid_configs,
    grid_params,
    read_surface,
    write_surface,
)

REPO = Path(__file__).resolve().parents[2]


def test_grid_of_the_tiny_cpu_space_is_every_distinct_engine():
    space = load_space(REPO / "search_spaces" / "tiny-cpu-all-methods.yaml")
    configs = grid_configs(space)
    keys = {config_key(c) for c in configs}
    assert len(keys) == len(configs)  # no engine twice
    by_method = {
        m: sum(c["method"] == m for c in configs)
        for m in ("none", "ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix", "medusa")
    }
    # 2 batch sizes x 1 memory fraction; ngram: 4 depths x 4 lookup windows; the baseline on
    # the target and on the MTP checkpoint (another target).
    assert by_method == {
        "none": 2 * 2,
        "ngram": 4 * 4 * 2,
        "draft_model": 4 * 1 * 2,
        "eagle": 4 * 2,
        "eagle3": 4 * 2,
        "mtp": 1 * 2,
        "suffix": 8 * 2,  # per-request trees only (max_cached_requests [0], the default)
        "medusa": 4 * 2,
    }
    assert all(
        c["prompt_lookup_min"] <= c["prompt_lookup_max"] for c in configs if c["method"] == "ngram"
    )
    assert grid_params(space)[0]["method"] == "none"  # a sweep starts at the baseline


SMALL = """
name: fake-grid
engine: {model: target, served_model_name: fake, startup_timeout_s: 30}
methods:
  ngram:
    num_speculative_tokens: {min: 1, max: 2}
    prompt_lookup_min: {min: 1, max: 1}
    prompt_lookup_max: {min: 2, max: 3}
  draft_model: {num_speculative_tokens: {min: 1, max: 2}, drafts: [good_draft]}
max_num_seqs: [4]
concurrency: [1, 2]
workload: {num_prompts: 4, max_tokens: 12, warmup_requests: 1}
measurement: {repeats: 2, confirm_top: 0, max_relative_mad: 10}  # about replay, not noise
slo: {p99_tpot_ms: 1000}
trials: 3
seed: 3
"""


def _record(space_dir, db_url, fake_launcher, tmp_path):
    space = loads_space(SMALL, base_dir=space_dir)
    grid = grid_params(space)
    job_id = create_job(Store(db_url), space, n_trials=len(grid))
    import optuna

    study = optuna.load_study(study_name=f"spectune-job-{job_id}", storage=db_url)
    for p in grid:
        study.enqueue_trial(p)
    run_job(
        Store(db_url), job_id, work_dir=tmp_path / "w", measurers=fake_measurers(fake_launcher)
    )
    out = tmp_path / "surface.jsonl"
    n = write_surface(Store(db_url), job_id, out, engine_version="fake")
    return space, grid, job_id, out, n


def test_record_then_replay_answers_the_recorded_numbers(
    space_dir,
    db_url,
    fake_launcher,
    tmp_path,
):
    space, grid, job_id, out, n = _record(space_dir, db_url, fake_launcher, tmp_path)
    assert n == len(grid)  # every configuration recorded (the bad-vocab one is not in this grid)
    surf = read_surface(out)
    assert surf.header["format"] == FORMAT and surf.header["recorded"]["engine"] == "fake"
    assert len(surf) == len(grid)
    pt = surf.lookup({"method": "none", "max_num_seqs": 4, "memory_fraction": 0.1})
    assert pt is not None and set(pt.measurements) == {
        (space.primary_workload, 1),
        (space.primary_workload, 2),
    }

    # Replay the same space from the surface.
    text = space_dir / "replay.yaml"
    data = space.model_dump(mode="json")
    data["name"] = "replayed"
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(out)}
    data["trials"] = 5
    import yaml

    text.write_text(yaml.safe_dump(data))
    rspace = load_space(text)
    rjob = create_job(Store(db_url), rspace)
    run_job(Store(db_url), rjob, work_dir=tmp_path / "w2")  # no launcher: nothing may launch
    recs = [r for r in trial_records(db_url, rjob) if r["state"] == "complete"]
    assert len(recs) >= 3
    for r in recs:
        if r["reused_from"] is not None:
            continue
        rec_pt = surf.lookup(r["params"])
        assert rec_pt is not None
        want = rec_pt.measurements[(space.primary_workload, space.primary_concurrency)]
        assert r["output_tok_per_s"] == want["output_tok_per_s"]
        assert r["p99_tpot_ms"] == want["p99_tpot_ms"]
        assert r["replay"] == str(out)  # labelled in every measurement
        assert r["log_path"] is None
    assert not (tmp_path / "w2" / "logs").exists()  # no engine log: nothing was launched
    rep = job_report(Store(db_url), rjob)
    assert rep.replay_surface == str(out)
    with pytest.raises(ExportError, match="replayed the recorded surface"):
        export_job(Store(db_url), rjob, "vllm-json")
    # A replay is not a measurement: it cannot be recorded as a surface either.
    with pytest.raises(SurfaceError, match="was a replay"):
        write_surface(Store(db_url), rjob, tmp_path / "again.jsonl")


def test_replay_report_is_labelled_in_the_cli(space_dir, db_url, fake_launcher, tmp_path, capsys):
    space, grid, job_id, out, n = _record(space_dir, db_url, fake_launcher, tmp_path)
    data = space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(out)}
    data["trials"] = 3
    import yaml

    p = space_dir / "replay.yaml"
    p.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert cli.main(["run", str(p), "--db", db_url, "--work-dir", str(tmp_path / "w3")]) == 0
    text = capsys.readouterr().out
    assert "REPLAY: every number below was answered from the recorded surface" in text
    assert "--speculative-config" not in text.split("REPLAY")[1]


def test_configuration_missing_from_the_surface_fails_as_not_recorded(
    space_dir,
    db_url,
    fake_launcher,
    tmp_path,
):
    space, grid, job_id, out, n = _record(space_dir, db_url, fake_launcher, tmp_path)
    lines = out.read_text().splitlines()
    kept = [lines[0]] + [ln for ln in lines[1:] if json.loads(ln)["config"]["method"] != "ngram"]
    out.write_text("\n".join(kept) + "\n")
    data = space.model_dump(mode="json")
    data["engine"] = {**data["engine"], "kind": "replay", "surface": str(out)}
    data["start_with"] = [{"method": "ngram", "num_speculative_tokens": 2}]
    data["trials"] = 2
    import yaml

    p = space_dir / "replay.yaml"
    p.write_text(yaml.safe_dump(data))
    rjob = create_job(Store(db_url), load_space(p))
    run_job(Store(db_url), rjob, work_dir=tmp_path / "w4")
    with Store(db_url).session() as s:
        rows = s.query(TrialModel).filter_by(job_id=rjob).order_by(TrialModel.number).all()
        assert rows[1].method == "ngram" and rows[1].state == "fail"
        assert rows[1].fail_reason == "not_recorded"
        assert "is not in the surface" in rows[1].fail_detail


def test_replay_needs_a_surface_and_only_replay_takes_one(space_dir):
    base = "name: x\nmethods: {ngram: {}}\nengine: {model: target, %s}\n"
    with pytest.raises(SpaceError, match=r"engine: .*kind replay needs surface"):
        loads_space(base % "kind: replay", base_dir=space_dir)
    with pytest.raises(SpaceError, match=r"engine: .*surface applies only to kind: replay"):
        loads_space(base % "surface: s.jsonl", base_dir=space_dir)


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ([], "empty file"),
        (['{"format": "other"}'], r":1: format: expected 'spectune-surface/1'"),
        (['{"format": "spectune-surface/1"}'], r":1: space: missing"),
        (["HEADER", "not json"], r":2: not valid JSON"),
        (["HEADER", "[1]"], r":2: each line must be a JSON object"),
        (["HEADER", '{"state": "complete"}'], r":2: config: missing"),
        (["HEADER", '{"config": {"method": "none"}, "state": "odd"}'], r":2: state: expected"),
        (
            [
                "HEADER",
                '{"config": {"method": "none"}, "state": "complete", "workload": "w",'
                ' "concurrency": 1}',
            ],
            r":2: metrics: missing",
        ),
        (
            [
                "HEADER",
                '{"config": {"method": "none"}, "state": "complete", "workload": "w",'
                ' "concurrency": 1, "metrics": {}}',
            ],
            r":2: metrics: must hold",
        ),
        (["HEADER", "POINT", "POINT"], r":3: concurrency: w at 1 recorded twice"),
        (
            ["HEADER", '{"config": {"method": "none"}, "state": "fail"}', "POINT"],
            r":3: config: measured row for a configuration that failed",
        ),
        (["HEADER"], "no measured points"),
    ],
)
def test_bad_surface_files_name_the_line_and_field(tmp_path, lines, error):
    header = json.dumps({"format": FORMAT, "space": {"name": "x"}})
    point = json.dumps(
        {
            "config": {"method": "none"},
            "state": "complete",
            "workload": "w",
            "concurrency": 1,
            "metrics": {"output_tok_per_s": 1.0},
        }
    )
    p = tmp_path / "s.jsonl"
    p.write_text(
        "\n".join(header if ln == "HEADER" else point if ln == "POINT" else ln for ln in lines)
    )
    with pytest.raises(SurfaceError, match=error):
        read_surface(p)


def test_unknown_job_is_job_not_found_and_writes_nothing(db_url):
    Store(db_url).ensure_schema()
    with pytest.raises(JobNotFound, match="job 99 not found"):
        write_surface(Store(db_url), 99, Path("/nonexistent/x.jsonl"))
    with Store(db_url).session() as s:
        assert s.query(JobModel).count() == 0


def test_engine_logs_of_two_databases_never_share_a_folder(tmp_path):
    from tuner.job import log_folder

    a = log_folder(f"sqlite:///{tmp_path / 'spectune.db'}", 1)
    b = log_folder(f"sqlite:///{tmp_path / 'surface.db'}", 1)
    c = log_folder(f"sqlite:///{tmp_path / 'other' / 'spectune.db'}", 1)
    assert len({a, b, c}) == 3 and a.startswith("spectune-") and a.endswith("-job-1")
    assert log_folder("postgresql://u:secret@db/spectune", 7).endswith("-job-7")
    assert "secret" not in log_folder("postgresql://u:secret@db/spectune", 7)
