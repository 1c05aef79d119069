"""The server against the job's winner: what the server exposes is compared, and what it
does not expose is named as not compared.

vLLM's ``/metrics`` gives the depth (one per-position counter per drafted token), the served
model name and the memory fraction (cache info); ``/v1/models`` gives the served name, the
checkpoint path and the context length. Nothing there says the method, the draft or head,
the n-gram lookup window, the batch size, the dtype or eager mode: those are listed as not
compared, never assumed equal.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tuner.engines import ServedModel, ServerSnapshot
from tuner.watch._model import WatchedJob

__all__ = ["NOT_COMPARED", "compare_server"]

NOT_COMPARED = [
    "method (n-gram, draft model, EAGLE, EAGLE-3, MTP) and its draft or head",
    "n-gram lookup window (prompt_lookup_min/max)",
    "max_num_seqs, dtype, enforce_eager and other engine flags",
]


def _same_path(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def compare_server(
    model: WatchedJob,
    snap: ServerSnapshot,
    served: Sequence[ServedModel] | None,
    served_error: str | None = None,
) -> tuple[list[str], list[str]]:
    """(differences from job N's winner, what could not be compared)."""
    eng, n = model.winner_engine, model.job_id
    spec = eng.get("speculative_config") or {}
    want_k = int(spec.get("num_speculative_tokens") or 0)
    diffs: list[str] = []
    if snap.positions != want_k:
        diffs.append(
            f"depth: the server drafts k={snap.positions}, job {n}'s winner k={want_k}"
            + (" (no speculation)" if want_k == 0 else "")
        )
    frac = eng.get("memory_fraction")
    if snap.memory_fraction is not None and frac is not None:
        if abs(snap.memory_fraction - float(frac)) > 1e-6:
            diffs.append(
                f"memory fraction: the server {snap.memory_fraction:g}, job {n}'s winner {frac:g}"
            )
    not_compared = list(NOT_COMPARED)
    if served is None:
        not_compared.append(f"model, served name, max_model_len: {served_error or 'unread'}")
        return diffs, not_compared
    names = [m.name for m in served]
    want_name = eng.get("served_model_name")
    if want_name and want_name not in names:
        diffs.append(f"served name: the server {names}, job {n}'s winner {want_name!r}")
    roots = [m.root for m in served if m.root]
    want_model = eng.get("model")
    if want_model and roots and not any(_same_path(r, want_model) for r in roots):
        diffs.append(
            f"model: the server loads {roots}, job {n}'s winner {want_model!r} "
            "(the same weights elsewhere differ by path only)"
        )
    lens = {m.max_model_len for m in served if m.max_model_len}
    want_len = eng.get("max_model_len")
    if want_len and lens and int(want_len) not in lens:
        diffs.append(f"max_model_len: the server {sorted(lens)}, job {n}'s winner {want_len}")
    return diffs, not_compared
