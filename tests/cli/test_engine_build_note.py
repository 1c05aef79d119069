"""The engine-build note (the vLLM CPU expand defect) in ``spectune plan`` and the report."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.helpers import REPO
from tuner import cli
from tuner.cli._search_text import engine_build_text
from tuner.engines import VLLMServer

NOTE = "the build drops X; SpecTune's launches fix it"


def test_plan_of_a_sampled_cpu_space_names_the_build_defect(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(
        VLLMServer, "build_note", classmethod(lambda cls, cfg: seen.append(cfg) or NOTE)
    )
    space = str(REPO / "search_spaces" / "tiny-cpu-sampled.yaml")
    assert cli.main(["plan", space, "--json"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["engine_build"] == NOTE
    assert seen and seen[0].speculative_config  # asked of a speculative configuration
    assert cli.main(["plan", space]) == cli.EXIT_OK
    assert f"engine build: {NOTE}" in capsys.readouterr().out


def test_plan_of_a_greedy_space_does_not_ask(monkeypatch, capsys):
    monkeypatch.setattr(VLLMServer, "build_note", classmethod(lambda cls, cfg: 1 / 0))
    space = str(REPO / "search_spaces" / "tiny-cpu.yaml")
    assert cli.main(["plan", space, "--json"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["engine_build"] is None


def test_the_report_names_the_note_once():
    recs = [
        SimpleNamespace(search={"preflight": [f"engine build: {NOTE}", "other"]}),
        SimpleNamespace(search={"preflight": [f"engine build: {NOTE}"]}),
        SimpleNamespace(search=None),
    ]
    assert engine_build_text(recs) == f"Engine build: {NOTE}"  # type: ignore[arg-type]
    assert engine_build_text([SimpleNamespace(search={"by": "sampler"})]) == ""  # type: ignore[list-item]


def test_preflight_of_a_launch_stores_the_note_for_the_real_engine_only(monkeypatch, tmp_path):
    from tuner.candidates import engine_config, grid_params, params_to_config
    from tuner.measure import LaunchMeasurer
    from tuner.space import loads_space

    monkeypatch.setattr(VLLMServer, "build_note", classmethod(lambda cls, cfg: NOTE))
    path = REPO / "search_spaces" / "tiny-cpu-sampled.yaml"
    space = loads_space(path.read_text(), base_dir=path.parent)
    configs = [engine_config(params_to_config(p, space), space) for p in grid_params(space)]
    cfg = next(c for c in configs if c.speculative_config)

    def measurer(launcher: list[str] | None) -> LaunchMeasurer:
        return LaunchMeasurer(space, {}, tmp_path, None, lambda *a: None, launcher=launcher)  # type: ignore[arg-type]

    assert f"engine build: {NOTE}" in measurer(None).check(cfg)
    assert not any(n.startswith("engine build") for n in measurer(["fake"]).check(cfg))
