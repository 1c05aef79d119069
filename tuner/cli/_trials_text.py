"""``spectune trials``: the table and the CSV rows, one row per trial."""

from __future__ import annotations

import json
from typing import Any

from tuner.cli._common import fmt, table
from tuner.methods import params_text
from tuner.storage import TrialRecord

__all__ = ["trials_rows", "trials_table"]

# ``trials --csv``: one row per trial, the objective point's metrics as columns. Per-level
# measurements and intervals are in ``--json``; a spreadsheet wants one flat table.
_CSV_FIRST = ("number", "state", "method", "configuration", "params", "workload", "concurrency")
_CSV_SKIP = {"measurements", "stats", "greedy_token_ids", "metrics"}


def trials_table(recs: list[TrialRecord]) -> str:
    rows = []
    for rec in recs:
        r, m = rec, rec.metrics
        note = r.fail_reason or (
            "reused " + str(r.reused_from) if r.reused_from is not None else ""
        )
        rows.append(
            [
                str(r.number),
                r.state,
                params_text(r.params) if "max_num_seqs" in r.params else str(r.params),
                fmt(m.get("output_tok_per_s")),
                fmt(m.get("p99_tpot_ms"), ".2f"),
                "-" if m.get("acceptance_rate") is None else f"{m['acceptance_rate']:.1%}",
                fmt(m.get("mean_acceptance_length"), ".2f"),
                note,
            ]
        )
    header = [
        "trial",
        "state",
        "configuration",
        "tok/s",
        "p99 TPOT ms",
        "accept",
        "mean acc len",
        "note",
    ]
    return table(rows, header)


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    return json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v


def trials_rows(recs: list[TrialRecord]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows for ``trials --csv``: fixed leading columns, then every other field
    in first-seen order (so a metric added later becomes a column, not a loss)."""
    flat = []
    for r in recs:
        d = r.flat()
        d["configuration"] = (
            params_text(r.params) + f" seqs={r.params['max_num_seqs']}"
            if "max_num_seqs" in r.params
            else ""
        )
        flat.append(d)
    header = list(_CSV_FIRST)
    for d in flat:
        header += [k for k in d if k not in header and k not in _CSV_SKIP]
    return header, [[_cell(d.get(k)) for k in header] for d in flat]
