"""Why the winner won: the measured economics, what mattered, and where speculation stops paying.

A user who only sees "ngram k=3" learns nothing they can carry to the next model. The report
says what the measurements say: how much of each draft the target accepted, how many tokens a
round commits, the time per committed token against the baseline's, the concurrency from which
speculation stops paying, and which parameters moved the objective (Optuna's importance
evaluator; with few trials that ranking is rough, and the report says so).
"""

from __future__ import annotations

import warnings
from typing import Any

import optuna

from tuner.candidates import sample_candidate
from tuner.pareto import Report
from tuner.storage import JobNotFound, Store

__all__ = ["explain", "param_importances"]

MIN_TRIALS_FOR_IMPORTANCE = 4


def param_importances(store: Store, job_id: int) -> tuple[dict[str, float], int]:
    """Importance of method, depth, batch size and memory fraction for the first objective
    (fANOVA, Optuna's default evaluator), and the number of distinct configurations it rests
    on; empty when there are fewer than MIN_TRIALS_FOR_IMPORTANCE.

    The job's own parameters are conditional (a draft's depth exists only in draft trials),
    which fANOVA would rank on a handful of trials each; so the complete trials are copied into
    an in-memory study on the parameters every configuration has, depth 0 meaning none."""
    try:
        space = store.space(job_id)
    except JobNotFound:
        space = None
    study = store.load_study(job_id)
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    rows: dict[tuple, float] = {}
    for t in done:
        if space is not None:
            try:
                if sample_candidate(optuna.trial.FixedTrial(t.params), space).get("target"):
                    continue  # another target (an MTP checkpoint): not this comparison
            except ValueError:
                pass
        method = t.params.get("method", "none")
        depth = t.params.get(f"{method}.num_speculative_tokens", 0)
        key = (
            method,
            depth,
            t.params.get("max_num_seqs"),
            t.params.get("memory_fraction"),
            tuple(sorted(t.params.items())),
        )
        rows[key] = t.values[0]
    if len(rows) < MIN_TRIALS_FOR_IMPORTANCE:
        return {}, len(rows)
    dists = {
        "method": optuna.distributions.CategoricalDistribution(sorted({k[0] for k in rows})),
        "num_speculative_tokens": optuna.distributions.IntDistribution(
            0, max(1, max(k[1] for k in rows))
        ),
        "max_num_seqs": optuna.distributions.CategoricalDistribution(sorted({k[2] for k in rows})),
        "memory_fraction": optuna.distributions.CategoricalDistribution(
            sorted({k[3] for k in rows})
        ),
    }
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the in-memory copy is not news
    flat = optuna.create_study(direction=study.directions[0])
    for (method, depth, seqs, mem, _), value in rows.items():
        flat.add_trial(
            optuna.trial.create_trial(
                params={
                    "method": method,
                    "num_speculative_tokens": depth,
                    "max_num_seqs": seqs,
                    "memory_fraction": mem,
                },
                distributions=dists,
                value=value,
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            imp = optuna.importance.get_param_importances(flat, normalize=True)
        except (RuntimeError, ValueError):
            return {}, len(rows)
    return {k: float(v) for k, v in imp.items() if v > 0}, len(rows)


def explain(
    rep: Report, importances: dict[str, float] | None = None, n_trials: int = 0
) -> list[str]:
    """Plain sentences, one per fact."""
    w = rep.winner
    if w is None:
        return ["No configuration is feasible under the SLO, so nothing won."]
    lines: list[str] = []
    m: dict[str, Any] = w.metrics
    if w.method == "none":
        lines.append(
            f"The baseline won at concurrency {rep.concurrency}: no speculative configuration "
            "measured here beat the same target without speculation under the SLO."
        )
    else:
        acc, mal = m.get("acceptance_rate"), m.get("mean_acceptance_length")
        k = w.params.get("num_speculative_tokens")
        if acc is not None and mal is not None:
            lines.append(
                f"The target accepted {acc:.1%} of the {k} drafted tokens per round; a round "
                f"commits {mal:.2f} tokens on average (accepted drafts + the target's own)."
            )
        v = next(
            (v for v in rep.verdicts.get(w.trial_number, []) if v.concurrency == rep.concurrency),
            None,
        )
        if v is not None:
            lines.append(
                f"Time per committed token: {v.spec_ms_per_token:.2f} ms against the baseline's "
                f"{v.baseline_ms_per_token:.2f} ms at concurrency {v.concurrency}: it "
                f"{v.text()} (draft + verify + coordination, as the client sees it)."
            )
        cross = rep.crossover.get(w.trial_number)
        levels = sorted(rep.baseline_by_conc)
        if cross is None and levels:
            lines.append(f"It pays at every concurrency measured ({', '.join(map(str, levels))}).")
        elif cross is not None:
            lines.append(
                f"It stops paying from concurrency {cross}: above that, serve without "
                "speculation or use a depth schedule."
            )
    if importances:
        top = sorted(importances.items(), key=lambda kv: -kv[1])[:3]
        lines.append(
            f"What moved {rep.objectives[0][0]} most (fANOVA over {n_trials} distinct "
            "configurations; rough with so few): "
            + ", ".join(f"{k} {v:.0%}" for k, v in top)
            + "."
        )
    return lines
