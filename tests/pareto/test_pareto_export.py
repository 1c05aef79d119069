from __future__ import annotations

import json
import shlex

import numpy as np
import optuna
import pytest

from tuner.engines import EngineConfig
from tuner.export import ExportError, export_point
from tuner.pareto import Point, feasible, pareto_mask, select_winner


def test_pareto_mask_two_objectives():
    vals = np.array([[100, 10], [120, 12], [90, 11], [120, 12], [130, 20]], dtype=float)
    mask = pareto_mask(vals, ["maximize", "minimize"])
    # [90, 11] is dominated by [100, 10]; the two equal rows are both kept.
    assert mask.tolist() == [True, True, False, True, True]


def test_pareto_mask_agrees_with_optuna_best_trials():
    rng = np.random.default_rng(0)
    study = optuna.create_study(directions=["maximize", "minimize"])
    slo = 15.0
    pts = rng.uniform([50, 5], [150, 25], size=(40, 2))
    for tok, tpot in pts:
        t = study.ask()
        t.set_constraint("p99_tpot_ms", tpot - slo)
        study.tell(t, [tok, tpot])
    best = {t.number for t in study.best_trials}
    feas_idx = [i for i, (_, tpot) in enumerate(pts) if tpot <= slo]
    mask = pareto_mask(pts[feas_idx], ["maximize", "minimize"])
    ours = {feas_idx[i] for i, keep in enumerate(mask) if keep}
    assert ours == best and ours


def test_feasible_names_violations():
    ok, why = feasible({"p99_tpot_ms": 12.0, "num_failed": 0}, {"p99_tpot_ms": 10})
    assert not ok and why == ("p99_tpot_ms 12.00 > 10",)
    ok, why = feasible({"p99_tpot_ms": 9.0, "num_failed": 2}, {"p99_tpot_ms": 10})
    assert not ok and "2 failed requests" in why
    assert feasible({"p99_tpot_ms": 9.0, "num_failed": 0}, {"p99_tpot_ms": 10}) == (True, ())


def _point(n, method, spec, tok, tpot):
    cfg = EngineConfig(
        model="/m/target",
        max_num_seqs=8,
        memory_fraction=0.1,
        speculative_config=spec,
        enforce_eager=True,
    )
    return Point(
        n,
        method,
        {"method": method},
        cfg.to_dict(),
        {"output_tok_per_s": tok, "p99_tpot_ms": tpot, "concurrency": 4},
        True,
        (),
    )


def test_winner_is_best_first_objective():
    a = _point(0, "none", None, 100, 5)
    b = _point(
        1,
        "ngram",
        {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 3,
        },
        150,
        7,
    )
    objs = [("output_tok_per_s", "maximize"), ("p99_tpot_ms", "minimize")]
    assert select_winner([a, b], objs) is b
    assert select_winner([], objs) is None


def test_export_json_and_cli():
    spec = {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 3}
    p = _point(1, "draft_model", spec, 150, 7)
    assert json.loads(export_point(p, "vllm-json")) == spec
    line = export_point(p, "vllm-cli")
    argv = shlex.split(line, comments=True)
    i = argv.index("vllm")
    assert "VLLM_TARGET_DEVICE=cpu" in argv[:i] and all("=" in w for w in argv[:i])
    assert argv[i : i + 3] == ["vllm", "serve", "/m/target"]
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == spec
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert "--enforce-eager" in argv
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.1"


def test_export_baseline_is_null_and_unknown_format_refused():
    p = _point(0, "none", None, 100, 5)
    assert export_point(p, "vllm-json") == "null"
    assert "--speculative-config" not in export_point(p, "vllm-cli")
    with pytest.raises(ExportError, match="format: unknown 'yaml'"):
        export_point(p, "yaml")
