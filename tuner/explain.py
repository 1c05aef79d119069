"""Why the winner won: the measured economics, what mattered, and where speculation stops paying.

A user who only sees "ngram k=3" learns nothing they can carry to the next model. The report
says what the measurements say: how much of each draft the target accepted, how many tokens a
round commits, the time per committed token against the baseline's (the one verdict in
``tuner.verdict``), where speculation stops paying, and which parameters moved the objective
-- only when the data can tell. Otherwise it says that the data cannot tell.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna

from tuner.candidates import sample_candidate
from tuner.launch_history import history_text
from tuner.launches import launch_count
from tuner.pareto import Point, Report
from tuner.storage import JobNotFound, Store
from tuner.verdict import level_summary

__all__ = [
    "Importances",
    "evidenced_importances",
    "explain",
    "importance_sentence",
    "launch_sentences",
    "param_importances",
]

MIN_CONFIGS_FOR_IMPORTANCE = 10  # distinct configurations before a ranking means anything
PERMUTATIONS = 100  # shuffles of the values behind each parameter's permutation test
ALPHA = 0.05  # family-wise: divided by the number of parameters tested (Bonferroni)
# PED-ANOVA (Optuna 5's default evaluator; handles conditional parameters) asking what sets
# the better half apart: its default top 10% is one or two trials in a job of this size.
_EVALUATOR = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=0.5)


@dataclass(frozen=True)
class Importances:
    """Parameters whose importance the data shows: (share of the total, permutation p-value).

    A parameter is kept only when the evaluator gives it more on the measured values than on
    the same values shuffled across configurations (p below 0.05 over the number of parameters),
    so noise never reads as a finding. The test is marginal: in an unbalanced sample a
    parameter that moved with an important one can pass too; the sentence says "moved"."""

    n_configs: int
    shown: dict[str, tuple[float, float]] = field(default_factory=dict)
    reason: str = ""


def _rows(store: Store, job_id: int) -> tuple[list[optuna.trial.FrozenTrial], list[float]]:
    """One complete trial per distinct configuration on the main target, first objective."""
    try:
        space = store.space(job_id, for_reading=True)
    except JobNotFound:
        return [], []
    seen: dict[str, tuple[optuna.trial.FrozenTrial, float]] = {}
    for t in store.load_study(job_id).get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)
    ):
        try:
            if sample_candidate(optuna.trial.FixedTrial(t.params), space).get("target"):
                continue  # another target (an MTP checkpoint): not this comparison
        except ValueError:
            continue
        seen.setdefault(repr(sorted(t.params.items())), (t, t.values[0]))
    return [t for t, _ in seen.values()], [v for _, v in seen.values()]


def _importances(
    trials: list[optuna.trial.FrozenTrial], values: list[float], direction: str
) -> dict[str, float]:
    study = optuna.create_study(direction=direction)
    for t, v in zip(trials, values, strict=True):
        study.add_trial(
            optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=v)
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return dict(
                optuna.importance.get_param_importances(
                    study, evaluator=_EVALUATOR, normalize=False
                )
            )
        except (RuntimeError, ValueError, ZeroDivisionError):
            return {}


def param_importances(store: Store, job_id: int, *, seed: int = 0) -> Importances:
    """Which parameters moved the job's first objective on its main target."""
    trials, values = _rows(store, job_id)
    direction = store.load_study(job_id).directions[0].name.lower()
    return evidenced_importances(trials, values, direction, seed=seed)


def evidenced_importances(
    trials: list[optuna.trial.FrozenTrial], values: list[float], direction: str, *, seed: int = 0
) -> Importances:
    """Importances (Optuna's default evaluator, PED-ANOVA, which handles conditional
    parameters), each only with evidence: enough distinct configurations, and a permutation
    test against the same values shuffled."""
    n = len(trials)
    if n < MIN_CONFIGS_FOR_IMPORTANCE:
        need = f"{n} distinct configurations; at least {MIN_CONFIGS_FOR_IMPORTANCE} are needed"
        return Importances(n, reason=need)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the in-memory copies are not news
    rng = random.Random(seed)
    full = _importances(trials, values, direction)
    if not full:
        return Importances(n, reason="the importance evaluator had too little to work on")
    null: dict[str, list[float]] = {k: [] for k in full}
    for _ in range(PERMUTATIONS):
        shuffled = values[:]
        rng.shuffle(shuffled)
        imp = _importances(trials, shuffled, direction)
        for k in full:
            null[k].append(imp.get(k, 0.0))
    total = sum(full.values()) or 1.0
    shown = {}
    for k, v in full.items():
        # One-sided permutation p-value: how often shuffled values give this much or more.
        p = (1 + sum(x >= v for x in null[k])) / (1 + PERMUTATIONS)
        if p < ALPHA / len(full):
            shown[k] = (v / total, p)
    reason = "" if shown else "no parameter stands above what the same values give shuffled"
    return Importances(n, dict(sorted(shown.items(), key=lambda kv: -kv[1][0])), reason)


def importance_sentence(metric: str, importances: Importances) -> str:
    """The one wording of what the data says moved ``metric`` (report, API and UI share it)."""
    if importances.shown:
        return (
            f"What moved {metric} (PED-ANOVA over {importances.n_configs} distinct "
            "configurations; p: permutation test against shuffled values): "
            + ", ".join(
                f"{k} {share:.0%} (p={p:.2f})" for k, (share, p) in importances.shown.items()
            )
            + "."
        )
    return f"The data cannot tell which parameter moved {metric} most ({importances.reason})."


def explain(rep: Report, importances: Importances | None = None) -> list[str]:
    """Plain sentences, one per fact; every verdict word comes from ``tuner.verdict``."""
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
        v = rep.verdict(w)
        if v is not None:
            lines.append(
                f"Time per committed token: {v.spec_ms_per_token:.2f} ms against the baseline's "
                f"{v.baseline_ms_per_token:.2f} ms at concurrency {v.concurrency}: it "
                f"{v.text()} (end to end per output token: prefill, draft, verify and "
                "coordination, as the client sees it)."
            )
        lines.append(level_summary(rep.verdicts.get(w.trial_number, [])))
    lines += _queue_sentence(rep, w)
    lines += launch_sentences(rep)
    if importances is not None:
        lines.append(importance_sentence(rep.objectives[0][0], importances))
    return lines


def _queue_sentence(rep: Report, w: Point) -> list[str]:
    """When the winner's batch size is below the report's concurrency: what queued, and
    which baseline its verdict is against (the one at the same batch)."""
    seqs = w.params.get("max_num_seqs")
    if not seqs or int(seqs) >= rep.concurrency:
        return []
    m = w.metrics
    queue = m.get("mean_queue_ms")
    base = rep.baselines.for_trial(w.trial_number)
    return [
        f"At concurrency {rep.concurrency} the engine ran {seqs} requests at once "
        f"(max_num_seqs {seqs}) and queued the rest"
        + (f": mean queue wait {queue:.1f} ms" if queue is not None else "")
        + (f", p99 TTFT {m['p99_ttft_ms']:.1f} ms" if m.get("p99_ttft_ms") is not None else "")
        + (
            f"; its verdict is against trial {base}, the baseline at the same batch."
            if base is not None and w.method != "none"
            else "."
        )
    ]


def _label(p: Point) -> str:
    rest = ", ".join(f"{k}={v}" for k, v in p.params.items() if k != "method")
    return f"trial {p.trial_number} ({p.method}{': ' + rest if rest else ''})"


def launch_sentences(rep: Report) -> list[str]:
    """What the launches say: the job's between-launch spread and how the intervals use it,
    whether the winner was confirmed (launched at least twice), and which configurations
    the job cannot tell apart from it."""
    metric = rep.objectives[0][0]
    lines: list[str] = []
    spread = rep.spreads.get(metric)
    if spread is not None:
        verdicts = (
            "every interval and verdict here includes that spread"
            if "ms_per_token" in rep.spreads
            else "every interval of it includes that spread (the verdicts cover one launch's "
            "repeats: the launches stored no time per token)"
        )
        source = history_text(spread) or (
            f"pooled over {spread.configurations} configuration(s) launched at least twice, "
            f"{spread.df} degree(s) of freedom"
        )
        lines.append(
            f"Between launches, {metric} moves by {spread.cv:.0%} at concurrency "
            f"{rep.concurrency} ({source}): {verdicts}, and a configuration launched once "
            "carries it."
        )
    elif rep.replay_surface is None:
        lines.append(
            "Nothing was launched twice, so the intervals cover only the repeats within one "
            "launch, which a second launch need not respect."
        )
    w = rep.winner
    if w is None or rep.replay_surface is not None:
        return lines
    n = launch_count(w.metrics)
    if rep.winner_confirmed:
        lines.append(f"The winner is confirmed: {n} undisturbed launches measured it.")
    else:
        lines.append(
            f"The winner is unconfirmed: {n} undisturbed launch(es) measured it, fewer than "
            "two (confirmation off, its budget spent, or a launch failed or was disturbed); "
            "deploy it only after a second launch."
        )
    same = rep.equivalent_to_winner
    if same:
        lines.append(
            "The job cannot tell these apart from the winner on "
            f"{metric}: " + "; ".join(_label(p) for p in same) + "."
        )
    return lines
