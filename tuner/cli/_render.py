"""What the command line prints: tables, progress lines, the report. No database access."""

from __future__ import annotations

import sys
import time
from typing import Any

from tuner.cli._common import fmt, table
from tuner.cli._latency_text import latency_text
from tuner.engines import EXPORT_FORMATS
from tuner.explain import explain
from tuner.export import depth_schedule, export_point
from tuner.job import TrialEvent
from tuner.launch_history import history_text
from tuner.launches import launch_count
from tuner.methods import params_text
from tuner.pareto import Point, Report
from tuner.space import sampling_text
from tuner.surface import surface_is_simulated
from tuner.verdict import per_token

__all__ = [
    "Progress",
    "fmt",
    "other_target_text",
    "report_text",
    "table",
]


class Progress:
    """One line per trial on stderr: a bar, what is being launched, then the result."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.t0 = time.monotonic()

    def _bar(self, done: int) -> str:
        width = 20
        fill = int(width * done / max(1, self.n))
        return "[" + "#" * fill + "-" * (width - fill) + f"] {done}/{self.n}"

    def start(self, number: int, params: dict[str, Any]) -> None:
        el = time.monotonic() - self.t0
        if params.get("confirm"):
            msg = (
                f"confirming trial {number}: {params_text(params)} (launched again to confirm) ..."
            )
            print(f"{self._bar(self.n)}  {el:6.0f}s  {msg}", file=sys.stderr, flush=True)
            return
        print(
            f"{self._bar(number)}  {el:6.0f}s  trial {number}: {params_text(params)} "
            f"max_num_seqs={params['max_num_seqs']} ...",
            file=sys.stderr,
            flush=True,
        )

    def done(self, ev: TrialEvent) -> None:
        if ev.state == "confirmed":
            print(
                f"{self._bar(self.n)}  trial {ev.number} confirmed in {ev.seconds:.0f}s: "
                f"{ev.summary}",
                file=sys.stderr,
                flush=True,
            )
            return
        print(
            f"{self._bar(ev.number + 1)}  trial {ev.number} {ev.state} in {ev.seconds:.0f}s: "
            f"{ev.summary}",
            file=sys.stderr,
            flush=True,
        )


def _ci(m: dict[str, Any], name: str, spec: str) -> str:
    """Median with its 95 % interval over repeats: ``123.4 [118.0-128.9]`` (hosted rows)."""
    v = m.get(name)
    if v is None:
        return "-"
    st = (m.get("stats") or {}).get(name)
    if not st or st.get("n", 1) < 2:
        return format(v, spec)
    return f"{format(v, spec)} [{format(st['ci95_low'], spec)}-{format(st['ci95_high'], spec)}]"


def _interval(rep: Report, p: Point, name: str, spec: str) -> str:
    """The report's value with its 95 % interval (``Report.interval``: over launches)."""
    v = p.metrics.get(name)
    if v is None:
        return "-"
    got = rep.interval(p, name)
    if got is None:
        return format(v, spec)
    return f"{format(v, spec)} [{format(max(0.0, got[0]), spec)}-{format(got[1], spec)}]"


def _interval_note(rep: Report) -> str:
    spread = rep.spreads.get(rep.objectives[0][0])
    if spread is None:
        return "medians of repeats, [95% interval within one launch: nothing launched twice]"
    source = history_text(spread)
    if source is not None:  # the machine's history was weighed: say how much went in
        return (
            "geometric means over launches, [95% interval for one more launch, from the "
            f"between-launch spread {spread.cv:.1%} ({source})]"
        )
    return (
        "geometric means over launches, [95% interval for one more launch, from the "
        f"job's between-launch spread: {spread.cv:.0%}, pooled over "
        f"{spread.configurations} configuration(s)]"
    )


def report_text(rep: Report, why: list[str] | None = None) -> str:
    """The Pareto table, the round-cost verdicts, why the winner won and its exports."""
    lines = []
    if rep.replay_surface is not None and surface_is_simulated(rep.replay_surface):
        lines.append(
            f"SIMULATED REPLAY: every number below was written by a simulator into "
            f"{rep.replay_surface}, not measured; no engine ran in this job (search "
            "benchmarking only)."
        )
    elif rep.replay_surface is not None:
        lines.append(
            f"REPLAY: every number below was answered from the recorded surface "
            f"{rep.replay_surface}; no engine ran in this job (search benchmarking only)."
        )
    lines += [
        f"Pareto front at concurrency {rep.concurrency}, workload {rep.workload} "
        f"({_traffic_text(rep)}, found under {sampling_text(rep.sampling)}), "
        f"SLO {rep.slo or 'none'} (objectives: "
        + ", ".join(f"{d} {m}" for m, d in rep.objectives)
        + f"; {_interval_note(rep)})"
    ]
    header = [
        "trial",
        "configuration",
        "tok/s",
        "p99 TPOT ms",
        "p99 TTFT ms",
        "accept",
        "mean acc len",
        "per-token speedup",
        "launches",
        "greedy match",
        "KV tokens",
        "feasible",
    ]
    rows = []
    shown = list(rep.front)
    for n in rep.baselines.all or [b.trial_number for b in (rep.baseline,) if b is not None]:
        b = next((p for p in rep.points if p.trial_number == n), None)
        if b is not None and all(b.trial_number != p.trial_number for p in shown):
            shown.append(b)
    for p in shown:
        m = p.metrics
        v = rep.verdict(p)
        if v is not None:
            sp_cell = f"{v.speedup:.2f}x {v.state}"
        else:
            sp_cell = "1.00x ref" if p.method == "none" else "-"
        rows.append(
            [
                str(p.trial_number)
                + ("*" if p is rep.winner else "")
                + ("c" if m.get("confirmed") else ""),
                params_text(p.params) + f" seqs={p.params['max_num_seqs']}",
                _interval(rep, p, "output_tok_per_s", ".1f"),
                _interval(rep, p, "p99_tpot_ms", ".2f")
                + ("~" if m.get("multi_token_chunks") else ""),
                fmt(m.get("p99_ttft_ms"), ".1f"),
                "-" if m.get("acceptance_rate") is None else f"{m['acceptance_rate']:.1%}",
                fmt(m.get("mean_acceptance_length"), ".2f"),
                sp_cell,
                str(launch_count(m)),
                "ref"
                if p.method == "none"
                else ("-" if p.lossless_match_rate is None else f"{p.lossless_match_rate:.0%}"),
                fmt(p.kv_cache_tokens),
                "yes" if p.feasible else "no: " + "; ".join(p.violations),
            ]
        )
    for r in rep.references:
        m = r.metrics or {}
        rows.append(
            [
                "hosted",
                f"{r.name}: {r.model} at {r.base_url}",
                _ci(m, "output_tok_per_s", ".1f"),
                _ci(m, "p99_tpot_ms", ".2f"),
                fmt(m.get("p99_ttft_ms"), ".1f"),
                "-",
                "-",
                "-",  # another server: no round-cost verdict against this baseline
                "-",
                "-",
                "-",
                ("yes" if r.feasible else "no: " + "; ".join(r.violations))
                + (f" ({r.error})" if r.error else ""),
            ]
        )
    lines.append(table(rows, header))
    lines.append(
        "(* winner; c: launched again to confirm it; launches: undisturbed engine launches "
        "behind the row; ~: streamed chunks carried several tokens, "
        "so TPOT spreads each request's time over its tokens and ITL is per chunk; per-token "
        "speedup: the round-cost verdict below; the baseline row is the same target "
        "without speculation"
        + (
            "; hosted rows: endpoints measured with the same workload and load generator, "
            "never candidates"
            if rep.references
            else ""
        )
        + ")"
    )
    lines += ["", _levels_text(rep)]
    if rep.latency_decides:
        lines += ["", latency_text(rep)]
    if why:
        lines += ["", "Why this winner:"] + [f"- {w}" for w in why]
    if rep.winner is None:
        lines.append("No configuration is feasible under the SLO: nothing to export.")
        return "\n".join(lines)
    if rep.replay_surface is not None:
        return "\n".join(lines)
    lines.append("")
    labels = {f.name: f.label for f in EXPORT_FORMATS}
    lines.append(f"Winner, {labels['vllm-json']}:")
    lines.append(export_point(rep.winner, "vllm-json"))
    lines.append("Winner command line:")
    lines.append(export_point(rep.winner, "vllm-cli"))
    sched = depth_schedule(rep)
    if sched is not None:
        lines.append(
            "The best depth differs by concurrency; as a batch-size schedule "
            "(export --format vllm-schedule-json):"
        )
        lines.append(export_point(rep.winner, "vllm-schedule-json", rep))
    return "\n".join(lines)


def other_target_text(orep: Report, main_target: str) -> str:
    """The report of another checkpoint the job served (an MTP model), against its own
    baseline."""
    return "\n".join(
        [
            f"\nAnother target in this job: {orep.target}",
            f"(served instead of {main_target} by some methods: compared only with its own "
            "baseline, never with the one above)",
            report_text(orep, explain(orep)),
        ]
    )


def _base_ms(rep: Report, number: int | None, c: int) -> float | None:
    """Baseline ``number``'s ms per token at level ``c`` (None: the main one), as the
    verdicts combine its launches."""
    for n, vs in rep.verdicts.items():
        for v in vs:
            if v.concurrency == c and number in (None, rep.baselines.for_trial(n)):
                return v.baseline_ms_per_token
    m = rep.measured.get(number, {}).get(c) if number is not None else None
    if m is None and number in (None, rep.baselines.main):
        m = rep.baseline_by_conc.get(c)
    pt = per_token(m or {})
    return pt[0] if pt else None


def _levels_text(rep: Report) -> str:
    """Per-concurrency round-cost verdicts: time per committed token against the baseline
    of the same batch class."""
    levels = sorted(rep.baseline_by_conc)
    out = [
        f"Round-cost verdict per concurrency (workload {rep.workload}): mean end-to-end time "
        "per output token against the baseline's at the same level and batch class"
    ]
    if not levels:
        return out[0] + "\n  (no baseline measured: no verdict)"
    header = ["trial", "configuration"] + [f"c={c}" for c in levels] + ["stops paying at"]
    seqs = rep.baselines.seqs
    batches = len(rep.baselines.by_class) > 1 or len(set(seqs.values())) > 1
    rows = [
        [
            f"base {n}" if batches else "base",
            "baseline (no speculation)" + (f" seqs={seqs.get(n)}" if batches else ""),
        ]
        + [f"{fmt(_base_ms(rep, n, c), '.2f')} ms/tok" for c in levels]
        + ["-"]
        for n in rep.baselines.all or [rep.baselines.main]
    ]
    names = {p.trial_number: p for p in rep.points}
    cut = {p.trial_number for p in rep.pruned}
    names.update({p.trial_number: p for p in rep.pruned})
    for number, vs in sorted(rep.verdicts.items()):
        p = names.get(number)
        by_c = {v.concurrency: v for v in vs}
        cells = [
            "-" if (v := by_c.get(c)) is None else f"{v.spec_ms_per_token:.2f} ms/tok {v.short()}"
            for c in levels
        ]
        cross = rep.crossover.get(number)
        if not vs:
            where = "-"
        elif not any(v.pays_off for v in vs):
            where = "never pays"
        else:
            where = "-" if cross is None else f"concurrency {cross}"
        label = params_text(p.params) if p is not None else f"trial {number}"
        if batches:
            label += f" seqs={seqs.get(number)} vs base {rep.baselines.for_trial(number)}"
        if number in cut:
            label += " (pruned: first level only)"
        rows.append([str(number), label, *cells, where])
    out.append(table(rows, header))
    out.append(
        "(+N%/-N%: faster/slower per token than the baseline; pays / no / tied: the 95% "
        "interval of the speedup ("
        + ("between launches" if "ms_per_token" in rep.spreads else "within one launch")
        + ") says it is faster / slower / cannot tell"
        + ("; pruned trials stopped after the objective level" if cut else "")
        + ")"
    )
    return "\n".join(out)


def _traffic_text(rep: Report) -> str:
    """Where the report's requests went and how long their prompts were, as the engine
    counted them."""
    how = "chat, through the model's chat template" if rep.endpoint == "chat" else "raw text"
    n = rep.prompt_tokens_mean
    return how if n is None else f"{how}, {n:.0f} prompt tokens a request"
