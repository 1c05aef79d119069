"""bench/protocol_spread.py: refusals before any launch, and 3 interleaved launches per
protocol on the FAKE OpenAI server (its numbers measure nothing real: this checks the
harness, not the machine)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.helpers import FAKE_PRESET, REPO, fake_measurers, make_preset_dir
from tuner.space import load_space
from tuner.storage import Store


def _bench():
    sys.path.insert(0, str(REPO))
    spec = importlib.util.spec_from_file_location(
        "protocol_spread", REPO / "bench/protocol_spread.py"
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


ps = _bench()


@pytest.fixture
def space_file(tmp_path):
    return make_preset_dir(tmp_path, FAKE_PRESET) / "fake-small.yaml"


@pytest.mark.parametrize(
    ("protocols", "extra", "field"),
    [
        ('{"a": {"warmup": "slow"}}', [], "--protocols: "),
        ('{"a": {"nope": 1}}', [], "--protocols: unknown measurement field(s) ['nope']"),
        ("[1]", [], "--protocols: a JSON object"),
        ('{"a": {}}', ["--extra", "b=2"], "--extra: 'b=2' is not NAME=N"),
    ],
)
def test_bad_protocols_are_refused_before_any_launch(
    space_file, protocols, extra, field, capsys, monkeypatch
):
    launched = []
    monkeypatch.setattr(ps, "relaunch", lambda *a, **k: launched.append(a))
    argv = ["--space", str(space_file), "--params", '[{"method": "none"}]']
    assert ps.main([*argv, "--protocols", protocols, *extra]) == 2
    assert field in capsys.readouterr().err and not launched


def test_protocols_interleaved_on_the_fake_server(space_file, tmp_path):
    space = load_space(space_file)
    configs = [ps.complete_params('{"method": "none"}', space)]
    protocols = {"fixed": {"warmup": "fixed"}, "steady": {"warmup": "steady", "repeat_s": 0.2}}
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    result = ps.compare(
        space,
        configs,
        protocols,
        launches=3,
        extra={"steady": 1},
        store=store,
        work_dir=tmp_path / "work",
        measurers=fake_measurers(),
    )
    doc = json.loads(json.dumps(result))
    fixed = doc["protocols"]["fixed"]["configurations"][0]
    steady = doc["protocols"]["steady"]["configurations"][0]
    assert fixed["launches"] == 3 and steady["launches"] == 4
    assert doc["protocols"]["steady"]["overrides"] == protocols["steady"]
    for row in (fixed, steady):
        assert row["mean_launch_s"] > 0 and set(row["levels"]) == {"1", "2"}
        for r in row["levels"].values():
            assert all(m > 0 for m in r["medians"]) and 0 <= r["coverage"] <= 1
