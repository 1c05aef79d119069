"""The command line's conventions: --version, --json on every command that prints data,
trials --csv, exit codes in --help, resume after an interruption, plan.

Jobs here replay the recorded tiny-cpu surface (no engine) or run on the FAKE OpenAI server.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.fake_space import make_space_dir
from tests.helpers import TINY_REPLAY_SPACE, fake_measurers
from tuner import cli
from tuner.cli import _commands
from tuner.cli._common import shown
from tuner.job import create_job, run_job
from tuner.space import loads_space
from tuner.storage import Store

REPO = Path(__file__).resolve().parents[2]
TROUBLESHOOTING = (REPO / "docs" / "troubleshooting.md").read_text()
REPLAY = TINY_REPLAY_SPACE.replace("{name}", "cli-replay").replace(
    "{model}", "../models/tiny/target"
)
FAKE = """
name: cli-fake
engine: {model: target, served_model_name: fake, startup_timeout_s: 30}
methods:
  ngram:
    num_speculative_tokens: {min: 1, max: 2}
    prompt_lookup_min: {min: 1, max: 1}
    prompt_lookup_max: {min: 2, max: 2}
  draft_model: {num_speculative_tokens: {min: 1, max: 2}, drafts: [good_draft, bad_vocab]}
max_num_seqs: [4]
concurrency: [1]
workload: {num_prompts: 4, max_tokens: 12, warmup_requests: 1}
slo: {p99_tpot_ms: 1000}
measurement: {repeats: 1, confirm_top: 0}
trials: 3
seed: 3
"""
# Every command prints data (and takes --json) but the two long-running service processes.
SERVICE_COMMANDS = {"serve", "worker"}


def _replay(tmp_path: Path, trials: int = 4) -> Path:
    p = tmp_path / "replay.yaml"
    surface = REPO / "bench" / "surfaces" / "tiny-cpu.jsonl"
    p.write_text(REPLAY.format(surface=surface, trials=trials))
    return p


def _out(capsys: pytest.CaptureFixture[str], argv: list[str], rc: int = 0) -> str:
    capsys.readouterr()
    assert cli.main(argv) == rc
    return capsys.readouterr().out


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"spectune {version('spectune')}"


def test_help_and_docs_give_every_exit_code(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    listed = {int(m) for m in re.findall(r"^  (\d+) +\S", text.split("exit codes:")[1], re.M)}
    assert listed == {cli.EXIT_OK, cli.EXIT_FAIL, cli.EXIT_INPUT, cli.EXIT_INFEASIBLE, 130}
    section = TROUBLESHOOTING.split("## Exit codes")[1].split("\n#")[0]
    assert {int(m) for m in re.findall(r"^\| `(\d+)` \|", section, re.M)} == listed


def test_every_data_command_takes_json():
    sub = next(a for a in cli.build_parser()._actions if a.dest == "cmd")
    data = set(sub.choices) - SERVICE_COMMANDS
    assert {"run", "resume", "jobs", "trials", "report", "export", "validate", "plan"} <= data
    missing = [c for c in data if "--json" not in sub.choices[c]._option_string_actions]
    assert missing == []


def test_replay_run_json_then_every_read_command_json_and_csv(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'c.db'}"
    space = _replay(tmp_path)
    work = ["--db", db, "--work-dir", str(tmp_path / "w")]
    rep = json.loads(_out(capsys, ["run", str(space), "--json", *work]))
    assert rep["replay_surface"] and rep["winner_trial"] is not None
    assert json.loads(_out(capsys, ["report", "1", "--json", "--db", db])) == rep
    jobs = json.loads(_out(capsys, ["jobs", "--json", "--db", db]))
    assert [(j["id"], j["state"], j["trials_done"]) for j in jobs] == [(1, "succeeded", 4)]
    trials = json.loads(_out(capsys, ["trials", "1", "--json", "--db", db]))
    rows = list(csv.DictReader(io.StringIO(_out(capsys, ["trials", "1", "--csv", "--db", db]))))
    assert [int(r["number"]) for r in rows] == [t["number"] for t in trials]
    for r, t in zip(rows, trials, strict=True):
        assert r["state"] == t["state"] and r["method"] == t["method"]
        assert json.loads(r["params"]) == t["params"]
        assert float(r["output_tok_per_s"]) == t["output_tok_per_s"]
    assert "measurements" not in rows[0]  # per-level numbers are --json's
    # A replay refuses to export: exit 3 and nothing on stdout for a script to misread.
    assert _out(capsys, ["export", "1", "--json", "--db", db], rc=3) == ""
    ok = json.loads(_out(capsys, ["validate", str(space), "--json"]))
    assert ok["valid"] is True and ok["methods"] == ["ngram"]
    assert json.loads(_out(capsys, ["db", "upgrade", "--json", "--db", db]))["revision"]


def test_json_errors_are_json_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmethods: {ngram: {}}\nengine: {model: nowhere}\ntrials: 0\n")
    for cmd in ("validate", "plan"):
        doc = json.loads(_out(capsys, [cmd, str(bad), "--json"], rc=2))
        assert doc["valid"] is False and doc["errors"][0]["loc"] == ["trials"]
    assert _out(capsys, ["trials", "7", "--csv", "--db", f"sqlite:///{tmp_path}/e.db"], 2) == ""


def test_resume_finishes_an_interrupted_run(tmp_path, capsys, monkeypatch):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    space = _replay(tmp_path, trials=6)
    work = ["--db", db, "--work-dir", str(tmp_path / "w")]
    seen = []

    def interrupt_after_two(self, ev):
        seen.append(ev.number)
        if len(seen) == 2:
            raise KeyboardInterrupt  # as Ctrl-C during the second trial's report

    monkeypatch.setattr(_commands.Progress, "done", interrupt_after_two)
    assert cli.main(["run", str(space), *work]) == 130
    monkeypatch.undo()
    before = json.loads(_out(capsys, ["trials", "1", "--json", "--db", db]))
    assert json.loads(_out(capsys, ["jobs", "--json", "--db", db]))[0]["state"] == "cancelled"
    first = {t["number"]: t["params"] for t in before if t["state"] == "complete"}
    # The second trial was measured and stored before Ctrl-C hit its report: Optuna recorded
    # it failed, but its stored row is what was measured, so it reads complete (and is kept).
    assert sorted(first) == [0, 1] and len(before) < 6

    rep = json.loads(_out(capsys, ["resume", "1", "--json", *work]))
    assert rep["winner_trial"] is not None
    after = json.loads(_out(capsys, ["trials", "1", "--json", "--db", db]))
    # The budget is a cap counting the trials before the interruption: the resumed search
    # went on from them and stopped by itself or at the cap, and says which.
    assert len(before) < len(after)
    stopped = rep["stop_reason"]
    assert stopped.startswith("nothing left can win") or stopped.startswith(
        "trial budget spent: 6 of 6"
    ), stopped
    assert {t["number"]: t["params"] for t in after if t["number"] in first} == first
    job = json.loads(_out(capsys, ["jobs", "--json", "--db", db]))[0]
    assert job["state"] == "succeeded"
    # ...counting launches: the interrupted trial's stored result may come back as a row of
    # its own (Optuna's retry, told what was stored), which launches nothing.
    assert job["engine_launches"] <= 6 and job["trials_done"] == len(after)
    # Nothing left to resume; an unknown job is bad input.
    assert cli.main(["resume", "1", *work]) == 2
    assert cli.main(["resume", "9", *work]) == 2
    assert "has finished" in capsys.readouterr().err


def test_resume_refuses_a_running_job_without_force(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    store = Store(db)
    store.ensure_schema()
    space = loads_space(REPLAY.format(surface="s.jsonl", trials=2), base_dir=tmp_path)
    job_id = create_job(store, space)
    store.start_job(job_id)  # as if another `spectune run` held it
    assert cli.main(["resume", str(job_id), "--db", db]) == 2
    assert "--force" in capsys.readouterr().err


def test_plan_counts_the_grid_refuses_by_preflight_and_labels_estimates(tmp_path, capsys):
    d = make_space_dir(tmp_path / "s")
    p = d / "fake.yaml"
    p.write_text(FAKE)
    plan = json.loads(_out(capsys, ["plan", str(p), "--json"]))
    # baseline 1 + ngram 2 depths + draft_model 2 depths x 2 drafts
    assert plan["grid"] == {
        "configurations": 7,
        "by_method": {"none": 1, "ngram": 2, "draft_model": 4},
    }
    refused = plan["preflight"]["refused"]
    assert len(refused) == 2
    assert all("vocab_size 200 != target 100" in r["reason"] for r in refused)
    est = plan["estimate"]
    assert est["is_estimate"] is True and est["search_launches_at_most"] == 3
    assert est["seconds_per_launch"] is None  # no history: unknown, never made up
    text = _out(capsys, ["plan", str(p)])
    assert "ESTIMATE (upper bound): at most 3 engine launches" in text
    assert "ESTIMATE of time: unknown" in text


def test_plan_time_estimate_and_export_json_from_a_fake_job(tmp_path, capsys, fake_launcher):
    d = make_space_dir(tmp_path / "s")
    db = f"sqlite:///{tmp_path / 'f.db'}"
    text = FAKE.replace("good_draft, bad_vocab", "good_draft")
    job_id = create_job(Store(db), loads_space(text, base_dir=d))
    run_job(Store(db), job_id, work_dir=tmp_path / "w", measurers=fake_measurers(fake_launcher))
    (d / "fake.yaml").write_text(text)
    est = json.loads(_out(capsys, ["plan", str(d / "fake.yaml"), "--json", "--db", db]))
    est = est["estimate"]
    assert est["seconds_per_launch"] > 0 and "past launches" in est["seconds_per_launch_from"]
    assert est["seconds_at_most"] == pytest.approx(est["seconds_per_launch"] * 3, abs=1)
    doc = json.loads(_out(capsys, ["export", str(job_id), "--json", "--db", db]))
    plain = _out(capsys, ["export", str(job_id), "--db", db])
    assert doc["format"] == "vllm-json" and doc["output"] == plain.rstrip("\n")
    assert doc["parsed"] == json.loads(plain)


def test_serve_says_loudly_when_the_web_ui_is_missing(tmp_path, capsys, monkeypatch):
    served = []
    monkeypatch.setattr("tuner.cli._service.uvicorn.run", lambda app, **kw: served.append(kw))
    db = ["--db", f"sqlite:///{tmp_path / 's.db'}", "--no-worker", "--port", "0"]
    assert cli.main(["serve", *db]) == 0
    assert "web UI NOT served" not in capsys.readouterr().err  # the checkout's web/
    monkeypatch.setenv("SPECTUNE_WEB_DIR", str(tmp_path / "empty"))
    assert cli.main(["serve", *db]) == 0
    assert "WARNING: web UI NOT served" in capsys.readouterr().err
    assert len(served) == 2


def test_printed_database_urls_hide_the_password():
    assert "s3cret" not in shown("postgresql://spectune:s3cret@db:5432/spectune")
    assert shown("sqlite:///a.db") == "sqlite:///a.db"


def test_the_cli_starts_without_the_web_framework():
    # Only serve and worker need the API: every other command starts without FastAPI.
    code = (
        "import sys, tuner.cli\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn')"
        " or m.startswith('tuner.api')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
