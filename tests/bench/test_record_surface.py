"""bench/record_surface.py's guards: it records every configuration as written (never as
its class's member), and refuses to resume a recording on other hardware."""

from __future__ import annotations

import importlib.util
import sys

from tests.fake_space import _space, make_space_dir
from tests.helpers import REPO
from tuner.job import create_job
from tuner.storage import Store


def _recorder():
    spec = importlib.util.spec_from_file_location(
        "record_surface", REPO / "bench/record_surface.py"
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_resuming_on_other_hardware_is_refused_before_any_launch(tmp_path, monkeypatch, capsys):
    d = make_space_dir(tmp_path)
    space = _space(d)
    (d / "space.yaml").write_text(space.model_dump_json())
    db = f"sqlite:///{tmp_path / 'surface.db'}"
    store = Store(db)
    store.ensure_schema()
    jid = create_job(store, space.model_copy(update={"name": f"{space.name}-surface"}))
    with store.session() as s:  # the recording was started on another machine
        from tuner.storage import JobModel

        job = s.get(JobModel, jid)
        job.space = {**job.space, "hardware": "Some Other CPU x64"}
    rec = _recorder()
    launched = []
    monkeypatch.setattr(rec, "run_job", lambda *a, **k: launched.append(a))
    argv = ["record_surface.py", str(d / "space.yaml"), "--out", str(tmp_path / "s.jsonl")]
    monkeypatch.setattr(sys, "argv", [*argv, "--db", db, "--work-dir", str(tmp_path / "w")])
    assert rec.main() == 2
    assert "other hardware" in capsys.readouterr().err and not launched
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--allow-other-host"])
    assert rec.main() == 0 and launched


def test_the_recording_job_launches_every_configuration_as_written(tmp_path, monkeypatch):
    d = make_space_dir(tmp_path)
    (d / "space.yaml").write_text(_space(d).model_dump_json())
    db = f"sqlite:///{tmp_path / 'surface.db'}"
    rec = _recorder()
    seen = []
    monkeypatch.setattr(
        rec, "run_job", lambda store, job_id, **k: seen.append(store.space(job_id))
    )
    argv = ["record_surface.py", str(d / "space.yaml"), "--out", str(tmp_path / "s.jsonl")]
    monkeypatch.setattr(sys, "argv", [*argv, "--db", db, "--work-dir", str(tmp_path / "w")])
    assert rec.main() == 0
    assert seen and seen[0].search == "sampler" and seen[0].measurement.confirm_top == 0
