"""bench/relaunch.py: the summary math on fixed numbers, the refusal of bad ``--params``
before any launch, and 3 launches on the FAKE OpenAI server (its numbers measure nothing
real: this checks the harness, not the machine)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from tests.helpers import FAKE_PRESET, REPO, fake_measurers, make_preset_dir
from tuner.space import load_space
from tuner.storage import Store


def _bench():
    spec = importlib.util.spec_from_file_location("relaunch", REPO / "bench/relaunch.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


rl = _bench()


def _pt(level: int, median: float, mad: float, lo: float, hi: float) -> dict:
    st = {"median": median, "mad": mad, "ci95_low": lo, "ci95_high": hi, "n": 3}
    return {
        "workload": "w",
        "concurrency": level,
        "output_tok_per_s": median,
        "stats": {"output_tok_per_s": st},
    }


def test_summary_on_fixed_numbers():
    # Four launches; each launch's own interval is +/-1 around its median, so no launch's
    # median falls in another's: the within-launch intervals cover nothing.
    launches = [
        [_pt(1, m, 0.5, m - 1, m + 1), {**_pt(1, m, 0.5, m - 1, m + 1), "workload": "other"}]
        for m in (100.0, 110.0, 121.0, 105.0)
    ]
    got = rl.summarise(launches, "output_tok_per_s", "w")
    assert list(got) == ["1"]
    r = got["1"]
    assert r["medians"] == [100.0, 110.0, 121.0, 105.0]  # the other workload is left out
    assert r["coverage_within"] == 0.0
    # within: each launch's 1.4826 * MAD / median; the median of four is the middle two's mean
    assert r["within_cv"] == pytest.approx((1.4826 * 0.5 / 105.0 + 1.4826 * 0.5 / 110.0) / 2)
    mean = sum(r["medians"]) / 4
    sd = math.sqrt(sum((m - mean) ** 2 for m in r["medians"]) / 3)
    assert r["between_cv"] == pytest.approx(sd / mean)
    assert r["coverage"] == 1.0  # three others with t(0.975, 2) are wide

    # An outlier launch falls outside what the others predict.
    far = launches[:3] + [[_pt(1, 300.0, 0.5, 299.0, 301.0)]] + [[_pt(1, 115.0, 0.5, 0, 1e9)]]
    r = rl.summarise(far, "output_tok_per_s", "w")["1"]
    assert r["coverage"] == pytest.approx(4 / 5)
    # Only the last launch's wide interval holds the others: 4 of the 20 ordered pairs.
    assert r["coverage_within"] == pytest.approx(4 / 20)


@pytest.fixture
def space_file(tmp_path):
    d = make_preset_dir(tmp_path, FAKE_PRESET.replace("max_num_seqs: [4]", "max_num_seqs: [4, 8]"))
    return d / "fake-small.yaml"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ("{not json", "--params: not JSON"),
        ("[1]", "--params: must be a JSON object"),
        ('{"method": "eagle"}', "params.method: 'eagle' is not in the space"),
        ('{"method": "ngram", "head": "x"}', "params.head: not a parameter of ngram"),
        ('{"method": "ngram", "num_speculative_tokens": 9}', "params.num_speculative_tokens: 9"),
        ('{"method": "none", "max_num_seqs": 5}', "params.max_num_seqs: 5 is not one of"),
        ('{"method": "none", "memory_fraction": 0.9}', "params.memory_fraction: 0.9"),
    ],
)
def test_bad_params_are_refused_naming_the_field(space_file, tmp_path, params, field, capsys):
    launched = []
    rl_main = _bench()
    rl_main.relaunch = lambda *a, **k: launched.append(a)
    argv = ["--space", str(space_file), "--params", params, "--work-dir", str(tmp_path / "w")]
    assert rl_main.main(argv) == 2
    assert field in capsys.readouterr().err and not launched


def test_too_few_launches_are_refused(space_file, capsys):
    argv = ["--space", str(space_file), "--params", '{"method": "none"}', "--launches", "2"]
    assert rl.main(argv) == 2
    assert "--launches: at least 3" in capsys.readouterr().err


def test_params_are_completed_as_the_job_does(space_file):
    space = load_space(space_file)
    base = rl.complete_params('{"method": "none"}', space)
    assert base == {
        "method": "none",
        "max_num_seqs": 4,
        "memory_fraction": space.memory_fraction[0],
    }
    ng = rl.complete_params({"method": "ngram", "max_num_seqs": 8}, space)
    assert ng["max_num_seqs"] == 8 and ng["num_speculative_tokens"] == 1
    assert ng["prompt_lookup_min"] <= ng["prompt_lookup_max"]
    dm = rl.complete_params({"method": "draft_model", "num_speculative_tokens": 2}, space)
    assert dm["draft"] == "draft" and dm["num_speculative_tokens"] == 2


def test_three_launches_on_the_fake_server(space_file, tmp_path):
    space = load_space(space_file)
    params = rl.complete_params('{"method": "ngram", "num_speculative_tokens": 2}', space)
    lines: list[str] = []
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    result = rl.relaunch(
        space,
        params,
        launches=3,
        store=store,
        work_dir=tmp_path / "work",
        measurers=fake_measurers(),
        say=lines.append,
    )
    doc = json.loads(json.dumps(result))  # what the last line prints
    assert doc["configuration"] == params and doc["launches"] == 3
    assert doc["failed_launches"] == 0 and doc["metric"] == "output_tok_per_s"
    assert set(doc["levels"]) == {"1", "2"} and len(lines) == 3
    for r in doc["levels"].values():
        assert len(r["medians"]) == 3 and all(m > 0 for m in r["medians"])
        assert 0 <= r["within_cv"] < 10 and 0 <= r["between_cv"] < 10
        assert 0 <= r["coverage"] <= 1 and 0 <= r["coverage_within"] <= 1
    assert store.job(1).engine_launches == 3  # counted on the job, as a job's are
    text = rl.table(result)
    assert "coverage" in text and text.count("\n") == 3
