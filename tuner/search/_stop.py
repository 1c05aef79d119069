"""When the search is over: nothing not launched yet can still beat the winner.

Why: a launch of a real target costs minutes of a GPU, and the job already knows a lot before
it spends one. Offline pricing (``_offline``) predicts every depth of every priced proposer
from the baseline alone, the depth model (``_depth``) every unlaunched depth of a launched
one, each with its own error band. So after every launch the job asks, for every
configuration of the objective class it has not launched:

- its optimistic value: the prediction at the good end of the prediction's own band (its
  ``rel_sigma``: the step-cost model's band, the anchor's interval and this job's measured
  prediction error so far), on the first objective at the objective point;
- against the winner's lower bound: the low end (high end for a metric to minimize) of the 95 %
  interval of the winner's *expected* value, ``exp(mean - t * s / sqrt(n))`` over its launches
  with the job's between-launch spread, or its repeats' interval before anything was launched
  twice; plus ``stop_margin`` (3 %) of the winner's value: a smaller gain is practically the
  winner's, and with many near ties (n-gram lookups a few % apart) every band would reach the
  bare bound, so nothing would ever stop the search short of its cap.

A configuration whose optimism cannot reach that bound cannot win, and is not launched. One
that can reach it is launched only while its expected gain is worth a launch: the expected
improvement beyond ``stop_margin`` over the winner's value (log-normal, the prediction's band
as ~2 sigma; not the winner's own interval: a launch of the candidate cannot tell where in it
the winner lies, its confirmation does, and with it in quadrature a winner launched once on a
noisy host made every candidate worth a launch) must reach ``stop_min_gain`` (1 %) of the
winner's value, the stop rule of Jones, Schonlau and Welch's EGO (1998). Launches are noisy
(the job's between-launch spread; before anything was launched twice, the space's
``stop_launch_noise``, 10 %, or the winner's repeats where they say more: ``launch_noise``):
a candidate predicted about as precisely as one launch measures would most likely read a tie
the job cannot tell from the winner, so its expected gain is discounted as Huang et al.'s
augmented expected improvement (2006) does for noisy kriging, by 1 - noise /
sqrt(band^2 + noise^2). A bracket wider than a launch's noise is not (one launch of the
proposer settles its split at every depth, which is worth more than the candidate's own
value); one narrower is (a depth next to the launched one: its split
moves the step less than a relaunch moves by itself, so one launch cannot place it in the
bracket, and a lucky draw of it would only take the lead to be confirmed). A near tie, whose
band reaches the bound but whose expected gain is below that, is named in the reason
("near ties") and not launched: a launch of it would most likely measure a tie the
job could not tell apart from the winner. Among what is worth a launch, the one with the
largest expected gain is launched next (``Outlook.best``, EGO's acquisition). A
proposer nothing can price yet (not priced offline, never launched: an unpriced method, a
sampled workload, another target's checkpoint) and another batch class's baseline and winner
(``_batches``) are unknown: one launch would tell, so the search goes on. When neither kind is
left, the search is over and the job says why, with the numbers (``Outlook.reason``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.launches import WITHIN, launch_values
from tuner.offline import OfflinePrices
from tuner.pareto import Report, feasible
from tuner.search._batches import class_launch
from tuner.search._depth import Prediction
from tuner.search._guide import depth_predictions
from tuner.search._layout import Layout, config_key, family_key
from tuner.search._offline import offline_predictions, proposer_name
from tuner.search._predicted import PredictedPoint
from tuner.space import SearchSpace
from tuner.stats import expected_gain, t975
from tuner.storage import TrialState

__all__ = ["Candidate", "Outlook", "launch_noise", "outlook", "winner_bound"]

_LISTED = 6  # proposers named in a stop reason; the rest counted


@dataclass(frozen=True)
class Candidate:
    """A configuration not launched yet, with what the job predicts of it (None: nothing)."""

    params: dict[str, Any]
    predicted: float | None  # central prediction of the first objective
    optimistic: float | None  # the good end of the prediction's band
    how: str  # "offline", "depth model", or why it cannot be priced yet
    note: dict[str, Any] | None = None  # the prediction as a trial stores it (``predicted``)
    gain: float | None = None  # expected gain beyond the margin, a share of the winner's value
    bracket: float = 0.0  # of the band, the unknown part (``Prediction.bracket``), relative

    def centre(self, maximize: bool) -> float | None:
        """Where the candidate is read: its prediction, or for a bracket its good end (one
        launch settles where in the bracket the proposer lies)."""
        if self.predicted is None:
            return None
        return self.predicted * (1.0 + (1.0 if maximize else -1.0) * self.bracket)


@dataclass(frozen=True)
class Outlook:
    """What is left to launch on the first objective at the objective point, and whether any
    of it can still beat the winner."""

    metric: str
    maximize: bool
    winner: int | None  # the winner's trial (None: nothing feasible yet)
    bound: float | None  # the winner's lower bound (upper for a metric to minimize)
    bound_how: str
    priced: int  # configurations not launched that have a prediction
    hopeful: tuple[Candidate, ...]  # their optimism reaches the bound
    unknown: tuple[Candidate, ...]  # nothing prices them without a launch
    top: float | None = None  # the best optimistic value of any priced configuration
    near: tuple[Candidate, ...] = ()  # optimism reaches the bound, expected gain too small
    min_gain: float = 0.0
    # Proposers priced and never launched: (name, best optimistic value; None: even that
    # breaks the SLO), so a user reads which were not launched and why.
    unlaunched: tuple[tuple[str, float | None], ...] = ()

    @property
    def can_win(self) -> bool:
        return self.winner is None or bool(self.hopeful or self.unknown)

    def beats(self, a: float, b: float) -> bool:
        return a > b if self.maximize else a < b

    @property
    def best(self) -> Candidate | None:
        """The hopeful candidate with the largest expected gain (EGO's acquisition, the
        same expected improvement the stop rule reads); by optimistic value where no gain
        was priced (no winner yet, or ``stop_min_gain`` 0)."""
        sign = 1.0 if self.maximize else -1.0

        def rank(c: Candidate) -> tuple[int, float, float]:
            g = c.gain
            return (g is None, -(g or 0.0), -sign * float(c.optimistic or 0.0))

        ranked = sorted(self.hopeful, key=rank)
        return ranked[0] if ranked else None

    @property
    def best_optimistic(self) -> float | None:
        best = self.best
        return None if best is None else best.optimistic

    def predicted_to_beat(self, value: float) -> bool:
        """Whether some candidate's central prediction beats ``value`` (or nothing prices
        one): then confirming the current winner first may be a launch spent on a loser."""
        if self.unknown:
            return True
        # A bracket is read at its good end, as its expected gain reads it (``_with_gain``).
        return any(
            (v := c.centre(self.maximize)) is not None and self.beats(v, value)
            for c in self.hopeful
        )

    def _not_launched(self) -> str:
        """The proposers priced and never launched, each with its best optimistic value."""
        if not self.unlaunched:
            return ""
        cells = [
            f"{name} at best {_num(v)}" if v is not None else f"{name} breaks the SLO"
            for name, v in self.unlaunched[:_LISTED]
        ]
        more = len(self.unlaunched) - _LISTED
        tail = f" and {more} more" if more > 0 else ""
        return f"; priced and not launched: {', '.join(cells)}{tail}"

    def reason(self) -> str:
        """One sentence with numbers: why the search is over, or what can still win."""
        if self.winner is None:
            return "nothing feasible yet: every configuration can still win"
        bound = f"the winner's {'lower' if self.maximize else 'upper'} bound {self.bound:.4g}"
        if not self.can_win:
            if not self.priced:
                return f"nothing left to launch: every configuration was launched ({bound})"
            if self.near:
                top = max(self.near, key=lambda c: float(c.gain or 0.0))
                g = float(top.gain or 0.0)
                return (
                    f"nothing left can win: {self.priced} configurations priced; "
                    f"{len(self.near)} near ties reach {bound} (trial {self.winner}, "
                    f"{self.bound_how}) but expect at most {100 * g:.2g} % beyond it "
                    f"({proposer_name(top.params)} predicted {_num(top.predicted)}), below "
                    f"the {100 * self.min_gain:g} % worth a launch; the rest cannot reach it"
                    + self._not_launched()
                )
            return (
                f"nothing left can win: {self.priced} configurations priced, best optimistic "
                f"{self.metric} {_num(self.top)} {'<' if self.maximize else '>'} {bound} "
                f"(trial {self.winner}, {self.bound_how})" + self._not_launched()
            )
        parts = []
        if self.hopeful:
            b = self.best
            assert b is not None and b.optimistic is not None
            parts.append(
                f"{len(self.hopeful)} of {self.priced} priced configurations can still reach "
                f"{bound} (best optimistic {b.optimistic:.4g}: {proposer_name(b.params)})"
            )
        if self.unknown:
            parts.append(f"{len(self.unknown)} cannot be priced without a launch")
        return "; ".join(parts)


def _num(v: float | None) -> str:
    return "none" if v is None else f"{v:.4g}"


def winner_bound(rep: Report, metric: str, maximize: bool) -> tuple[float, str] | None:
    """The winner's lower bound (upper for a metric to minimize) on its expected value, and
    how it was had: over its launches with the job's spread, else its repeats' interval."""
    w = rep.winner
    if w is None or w.metrics.get(metric) is None:
        return None
    spread = rep.spreads.get(metric)
    values = launch_values(w.metrics, metric)
    if spread is not None and values:
        logs = [math.log(v) for v in values]
        mean = sum(logs) / len(logs)
        half = t975(spread.df) * spread.log_sd / math.sqrt(len(logs))
        edge = mean - half if maximize else mean + half
        n = len(values)
        return math.exp(edge), f"{n} launch{'es' if n > 1 else ''}, between-launch spread"
    iv = rep.interval(w, metric)
    if iv is not None and iv[2] == WITHIN:
        return (iv[0] if maximize else iv[1]), "one launch's repeats"
    return float(w.metrics[metric]), "one launch, no interval"


def _optimistic(pred: Prediction, metric: str, maximize: bool) -> dict[str, float]:
    """The prediction at the good end of its own band: every metric moved by ``rel_sigma``
    in the direction that helps (throughput up, latencies down)."""
    out = {}
    for k, v in pred.metrics.items():
        up = k in ("output_tok_per_s", "requests_per_s", "goodput_req_per_s")
        f = 1.0 + pred.rel_sigma if up else max(0.0, 1.0 - pred.rel_sigma)
        out[k] = float(v) * f
    return out


def outlook(
    space: SearchSpace,
    rows: Sequence[Any],
    memory_for: Callable[[dict[str, Any]], float],
    grid: Sequence[dict[str, Any]] | None,
    prices: OfflinePrices | None,
    rep: Report,
) -> Outlook:
    """What is left of the objective class and whether any of it can beat ``rep``'s winner
    (``rep``: the job's report at the objective point, on engine.model)."""
    o = space.objectives[0]
    metric, maximize = o.metric, o.resolved_direction == "maximize"
    limits = space.slo.limits()
    lay = Layout.of(space, rows, memory_for, grid)
    level = (space.primary_workload, space.primary_concurrency)
    got = winner_bound(rep, metric, maximize)
    bound, how = got if got is not None else (None, "")
    if bound is not None and rep.winner is not None and space.stop_margin > 0:
        # A gain below the margin is practically the winner's: not worth a launch.
        gain = space.stop_margin * abs(float(rep.winner.metrics[metric]))
        bound = bound + gain if maximize else bound - gain
        how += f", {'+' if maximize else '-'}{100 * space.stop_margin:g} % of its value"
    winner = rep.winner.trial_number if got is not None and rep.winner is not None else None

    seen: set[str] = set()
    cands: list[Candidate] = []

    fam_best: dict[str, float | None] = {}  # proposers never launched: best optimism

    def add(c: dict[str, Any], pred: Prediction, hi: dict[str, float], src: str) -> None:
        key = config_key(c)
        if key in seen or key in lay.taken or metric not in pred.metrics or metric not in hi:
            return
        seen.add(key)
        ok = feasible(hi, limits)[0]  # even its optimism breaks the SLO: it cannot win
        v = float(hi[metric])
        if (fk := family_key(c)) not in lay.started:
            old = fam_best.get(fk)
            fam_best[fk] = v if ok and (old is None or (v > old) == maximize) else old
        if ok:
            note = PredictedPoint.of(c, pred, level).note(metric)
            p = float(pred.metrics[metric])
            cands.append(Candidate(c, p, v, src, note, bracket=pred.bracket))

    modelled = depth_predictions(space, rows, lay)
    for c, pred in modelled:
        add(c, pred, _optimistic(pred, metric, maximize), "depth model")
    keys = {config_key(c) for c, _ in modelled}
    for c, pred, _best in offline_predictions(space, rows, lay, prices, keys):
        add(c, pred, _optimistic(pred, metric, maximize), "offline")
    priced = len(seen)

    unknown: list[Candidate] = []
    failed = {family_key(r.params) for r in rows if r.state == TrialState.FAIL}
    priced_families = set(prices.by_proposer) if prices is not None else set()
    for fk, members in lay.families.items():
        if fk in lay.started or fk in priced_families or fk in failed:
            continue
        deepest = lay.place(max(members, key=lambda c: c["num_speculative_tokens"]))
        why = (prices.unpriced.get(fk) if prices is not None else None) or "not priced"
        unknown.append(Candidate(deepest, None, None, f"no prediction ({why})"))
    batch = class_launch(space, rows, lay)
    if batch is not None:
        unknown.append(Candidate(batch.params, None, None, batch.why))

    reach = [
        c for c in cands if bound is None or c.optimistic is None or _reaches(c, bound, maximize)
    ]
    noise = launch_noise(rep, metric, space.stop_launch_noise)
    wv = float(rep.winner.metrics[metric]) if winner is not None and rep.winner else None
    if wv is not None and wv > 0 and space.stop_min_gain > 0:
        reach = [_with_gain(c, wv, space.stop_margin, maximize, noise) for c in reach]
    hopeful = tuple(c for c in reach if c.gain is None or c.gain >= space.stop_min_gain)
    near = tuple(c for c in reach if c not in hopeful)
    values = [float(c.optimistic) for c in cands if c.optimistic is not None]
    top = (max if maximize else min)(values) if values else None
    unlaunched = tuple(
        (
            proposer_name(
                {k: v for k, v in lay.families[fk][0].items() if k != "num_speculative_tokens"}
            ),
            v,
        )
        for fk, v in fam_best.items()
    )
    return Outlook(
        metric,
        maximize,
        winner,
        bound,
        how,
        priced,
        hopeful,
        tuple(unknown),
        top,
        near=near,
        min_gain=space.stop_min_gain,
        unlaunched=unlaunched,
    )


def launch_noise(rep: Report, metric: str, prior: float = 0.0) -> float:
    """What one launch's value moves by (log sd), for the expected gain's noise discount:
    the job's between-launch spread (the machine's history pooled in); before anything was
    launched twice, ``prior`` (the space's ``stop_launch_noise``, 10 % by default, as the
    calibration's prior), or what the winner's repeats say one launch moves by where that is
    more. Why not the repeats alone: launches differ more than their repeats (issue 21), and
    on the first job on a host whose relaunches moved 19-22 % each depth next to the winner's
    looked worth a launch (a fresh demo launched suffix k=8, 6, 3, 4, 7 before it relaunched
    anything). The measured spread replaces the prior at once: kept beside a quiet host's
    (2.7 %, simulated roofline) as two degrees of freedom, it made 17 % of 30 answers right."""
    spread = rep.spreads.get(metric)
    if spread is not None:
        return spread.log_sd
    return max(prior, _repeats_log_sd(rep, metric))


def _repeats_log_sd(rep: Report, metric: str) -> float:
    """What the winner's repeats say one launch of it moves by on the log scale: their 95 %
    interval read as a normal one; 0 without one."""
    w = rep.winner
    if w is None or not w.metrics.get(metric):
        return 0.0
    iv = rep.interval(w, metric)
    if iv is None or iv[2] != WITHIN or iv[0] <= 0 or iv[1] <= 0:
        return 0.0
    return math.log(iv[1] / iv[0]) / (2 * 1.96)


def _with_gain(
    c: Candidate,
    winner: float,
    margin: float,
    maximize: bool,
    noise: float = 0.0,
) -> Candidate:
    """``c`` with its expected gain over the winner's value beyond ``margin``: its band's
    noise taken as ~2 sigma around the good end of its bracket (the middle when it has none),
    as Huang et al. take the incumbent as a known value; with a launch's ``noise`` (log sd:
    ``launch_noise``), discounted for what one launch can tell (augmented expected
    improvement, module docstring) unless its bracket is wider than that noise."""
    if c.predicted is None or c.optimistic is None or c.predicted <= 0 or c.optimistic <= 0:
        return c
    sign = 1.0 if maximize else -1.0
    centre = float(c.centre(maximize) or 0.0)
    if centre <= 0:
        return c
    band = abs(c.optimistic / c.predicted - 1.0)
    band_sd = math.log1p(max(0.0, band - c.bracket)) / 1.96
    gain = expected_gain(sign * math.log(centre / winner), band_sd, margin)
    if noise > 0 and math.log1p(c.bracket) < noise:  # a launch cannot settle the bracket
        own = math.log1p(band) / 1.96
        gain *= 1.0 - noise / math.sqrt(own * own + noise * noise)
    return dataclasses.replace(c, gain=gain)


def _reaches(c: Candidate, bound: float, maximize: bool) -> bool:
    v = float(c.optimistic or 0.0)
    return v > bound if maximize else v < bound
