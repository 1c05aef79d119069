"""SGLang's adaptive speculation as a searched axis (issue 34): the space, the trial's
parameters and speculative config, SGLang's flags and config file, every other engine's
refusal before a launch, the exports, offline pricing, and a job against the FAKE SGLang
server (SGLang needs CUDA; the fake refuses what SGLang's later releases refuse)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from tests.helpers import (
    REPO,
    TINY,
    every_method_space,
    run_fake_job,
    run_on_fake_sglang,
    trial_records,
)
from tuner.candidates import engine_config
from tuner.engines import (
    ADAPTIVE_STEPS,
    EngineConfig,
    ExportUnsupported,
    SGLangServer,
    VLLMServer,
    render_export,
    sglang_adaptive_config,
    sglang_spec_flags,
)
from tuner.methods import METHODS, params_text
from tuner.offline import price_proposers
from tuner.space import SearchSpace, SpaceError, loads_space
from tuner.surface import grid_params, params_to_config


def _space(adaptive: object, kind: str = "sglang", trials: int = 3):
    data = every_method_space(kind=kind, device="cuda", trials=trials).model_dump(mode="json")
    for name in ("mtp", "eagle3", "draft_model", "ngram"):
        data["methods"].pop(name, None)
    data["start_with"] = []
    data["methods"]["eagle"]["num_speculative_tokens"] = {"min": 2, "max": 2}
    data["methods"]["eagle"]["adaptive"] = adaptive
    return loads_space(json.dumps(data), base_dir=REPO)


def _run_on_fake_sglang(db_url: str, tmp_path: Path, space: SearchSpace) -> dict[str, dict]:
    """Run the job against the FAKE SGLang server: its trial records by method."""
    return {r["method"]: r for r in run_on_fake_sglang(db_url, tmp_path, space)}


def _spec(steps: list[int] | None = None, method: str = "eagle", k: int = 2) -> dict:
    spec = {"method": method, "model": str(TINY / "eagle"), "num_speculative_tokens": k}
    return spec if steps is None else {**spec, ADAPTIVE_STEPS: steps}


def test_the_axis_is_searched_as_off_or_candidate_steps():
    space = _space([False, [7, 1, 3]])
    assert space.methods.eagle.adaptive_choices == ["off", "1,3,7"]
    eagle = [params_to_config(p, space) for p in grid_params(space)]
    eagle = [c for c in eagle if c["method"] == "eagle"]
    assert sorted(c["adaptive"] for c in eagle) == ["1,3,7", "off"]
    by = {c["adaptive"]: engine_config(c, space).speculative_config for c in eagle}
    assert ADAPTIVE_STEPS not in by["off"]  # off: the config every engine takes, unchanged
    assert by["1,3,7"][ADAPTIVE_STEPS] == [1, 3, 7]
    on = next(c for c in eagle if c["adaptive"] != "off")
    assert "adaptive=1,3,7" in params_text(on)
    assert "adaptive" not in params_text(next(c for c in eagle if c["adaptive"] == "off"))
    # Left out: not searched, and no parameter at all (trials stored before keep theirs).
    assert not any(
        p.key == "adaptive" for p in METHODS["eagle"].active(_space(None).methods.eagle)
    )


@pytest.mark.parametrize(
    ("adaptive", "why"),
    [
        ([True], "list the candidate steps"),
        ([False, False], "must not repeat"),
        ([[3, 1], [1, 3]], "must not repeat"),
        ([[0]], "greater than or equal to 1"),
        ([], "at least 1"),
    ],
)
def test_a_bad_choice_is_refused_naming_the_field(adaptive, why):
    with pytest.raises(SpaceError, match="methods.eagle.adaptive") as e:
        _space(adaptive)
    assert why in str(e.value)


def test_sglang_gets_the_flags_and_a_config_holding_the_trials_depth():
    cfg = sglang_adaptive_config(_spec([1, 3, 7], k=4))
    assert cfg == {"candidate_steps": [1, 3, 4, 7], "1": {"candidate_steps": [1, 3, 4, 7]}}
    flags = sglang_spec_flags(_spec([1, 3], k=2), "/run/a.json")
    assert flags[-3:] == ["--speculative-adaptive", "--speculative-adaptive-config", "/run/a.json"]
    assert "--speculative-num-steps" in flags and sglang_adaptive_config(_spec()) is None
    assert "--speculative-adaptive" not in sglang_spec_flags(_spec())
    with pytest.raises(ExportUnsupported, match="adapts EAGLE only"):
        sglang_spec_flags({**_spec([1, 3]), "method": "draft_model"})


def test_every_other_engine_refuses_it_before_a_launch():
    why = VLLMServer.speculative_problem(_spec([1, 3]), "cuda")
    assert why is not None and why.startswith("methods.*.adaptive: vLLM has no adaptive")
    assert VLLMServer.speculative_problem(_spec(), "cuda") is None
    assert SGLangServer.speculative_problem(_spec([1, 3]), "cuda") is None
    draft = {**_spec([1, 3]), "method": "draft_model"}
    assert "EAGLE and EAGLE-3 only" in str(SGLangServer.speculative_problem(draft, "cuda"))
    suffix = {"method": "suffix", "num_speculative_tokens": 8}
    assert (
        SGLangServer.speculative_problem(suffix) == "methods.suffix: SGLang has no suffix proposer"
    )
    # The rest of SGLang's own checks still apply to an adaptive config.
    sampled = {**_spec([1, 3]), "draft_sample_method": "probabilistic"}
    assert "draft_sample_method" in str(SGLangServer.speculative_problem(sampled, "cuda"))


def test_exports_write_the_config_for_sglang_and_refuse_elsewhere(tmp_path):
    cfg = EngineConfig(model="m", speculative_config=_spec([1, 3], k=2), device="cuda")
    eagle3 = EngineConfig(
        model="m", speculative_config={**_spec([1, 3], k=2), "method": "eagle3"}, device="cuda"
    )
    for name, c in (("vllm-json", cfg), ("vllm-cli", cfg), ("trtllm-yaml", eagle3)):
        with pytest.raises(ExportUnsupported, match="adaptive"):
            render_export(name, c)
    line = render_export("sglang", cfg)
    assert "\n" not in line.strip()
    echo, server = line.split(" && ", 1)
    words = shlex.split(echo)
    assert words[0] == "echo" and words[2:] == [">", "sglang-adaptive.json"]
    assert json.loads(words[1])["1"]["candidate_steps"] == [1, 2, 3]
    assert "--speculative-adaptive-config sglang-adaptive.json" in server
    plain = EngineConfig(model="m", speculative_config=_spec(), device="cuda")
    assert "echo" not in render_export("sglang", plain)
    assert "adaptive" not in render_export("vllm-json", plain)
    plain3 = EngineConfig(model="m", speculative_config={**_spec(), "method": "eagle3"})
    assert yaml.safe_load(render_export("trtllm-yaml", plain3))["speculative_config"]


def test_an_adaptive_proposer_is_not_priced_offline():
    on = {"method": "eagle", "head": "h", "num_speculative_tokens": 2, "adaptive": "1,3"}
    off = {**on, "adaptive": "off"}
    got = price_proposers({"on": on, "off": off}, [], 64)
    assert "adaptive depth is picked per batch" in got.unpriced["on"]
    assert "adaptive" not in got.unpriced["off"]  # priced as ever (here: no baseline ids)


def test_a_vllm_job_fails_the_adaptive_trial_before_launching_it(db_url, fake_launcher, tmp_path):
    space = _space([[1, 3]], kind="vllm", trials=2)
    job_id = run_fake_job(db_url, space, tmp_path / "w", fake_launcher)
    recs = {r["number"]: r for r in trial_records(db_url, job_id)}
    eagle = next(r for r in recs.values() if r["method"] == "eagle")
    assert eagle["state"] == "fail" and eagle["fail_reason"] == "invalid_config"
    assert "methods.*.adaptive: vLLM has no adaptive speculation" in eagle["fail_detail"]
    assert eagle["startup_s"] is None  # no engine was launched for it


def test_an_sglang_job_launches_adaptive_eagle_with_its_config_file(db_url, tmp_path):
    recs = _run_on_fake_sglang(db_url, tmp_path, _space([[1, 3]], trials=2))
    eagle = recs["eagle"]
    assert eagle["state"] == "complete", eagle["fail_detail"]
    assert eagle["params"]["adaptive"] == "1,3"
    argv = shlex.split(Path(eagle["log_path"]).read_text().splitlines()[0].split(": ", 1)[-1])
    where = Path(argv[argv.index("--speculative-adaptive-config") + 1])
    assert where.parent == Path(eagle["log_path"]).parent  # kept beside the trial's log
    assert json.loads(where.read_text())["1"]["candidate_steps"] == [1, 2, 3]


def test_an_sglang_job_launches_ngram_and_a_draft_model_as_ngram_and_standalone(db_url, tmp_path):
    data = every_method_space(kind="sglang", device="cuda", trials=3).model_dump(mode="json")
    for name in ("mtp", "eagle", "eagle3"):
        data["methods"].pop(name)
    data["start_with"] = [
        {"method": "ngram", "num_speculative_tokens": 2},
        {"method": "draft_model", "num_speculative_tokens": 2},
    ]
    data["measurement"]["confirm_budget"] = 0
    recs = _run_on_fake_sglang(db_url, tmp_path, loads_space(json.dumps(data), base_dir=REPO))
    for method, algorithm in (("ngram", "NGRAM"), ("draft_model", "STANDALONE")):
        r = recs[method]
        assert r["state"] == "complete", r["fail_detail"]
        assert r["acceptance_rate"] is not None and r["acceptance_rate"] > 0
        argv = Path(r["log_path"]).read_text().splitlines()[0]
        assert f"--speculative-algorithm {algorithm}" in argv
    assert "--speculative-draft-model-path" in Path(recs["draft_model"]["log_path"]).read_text()
