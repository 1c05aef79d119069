"""Every proposer of a space priced from the baseline's greedy outputs, at every depth.

What is priced: n-gram lookups (vLLM's rule replayed, exact for greedy traffic), draft
models (one teacher-forced forward each) and EAGLE, EAGLE-3 and MiMo MTP heads (one forward
of the target for the features they read, then the head's own drafting chain). A head whose
graph is not mirrored, or a checkpoint that does not load, is unpriced with the reason and
launched to learn its acceptance, as before. Sampled traffic is priced on the baseline's
sampled outputs with the target's probabilities of each round's guesses (``_sampled``), a
draft that samples its guesses with E[min(1, p/q)] a position (``_probabilistic``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tuner.engines import suffix_trees_missing
from tuner.hub import is_hub_id, local_view
from tuner.methods import ADAPTIVE_OFF
from tuner.offline._draft import DraftGuesses
from tuner.offline._heads import HEAD_METHODS, head_guesses
from tuner.offline._ngram import ngram_propose
from tuner.offline._probabilistic import overlaps, price_probabilistic
from tuner.offline._rounds import OfflineAcceptance, TokenSequence, replay_rounds
from tuner.offline._sampled import TargetProbs, draft_chains, price_sampled
from tuner.offline._suffix import GLOBAL_TREE_NOTE, SuffixReplay

__all__ = ["UNPRICED_OTHER_TARGET", "OfflinePrices", "price_proposers"]

UNPRICED_OTHER_TARGET = (
    "not priced offline: its target's baseline has no token ids yet (it is priced once "
    "that baseline has run)"
)


@dataclass(frozen=True)
class OfflinePrices:
    """Offline acceptance per proposer (a caller's key) and depth, and why others are not
    priced. Predictions from the baseline's outputs, never measurements."""

    by_proposer: dict[str, dict[int, OfflineAcceptance]] = field(default_factory=dict)
    unpriced: dict[str, str] = field(default_factory=dict)
    basis: str = ""  # what they were computed from, in words
    seconds: float = 0.0
    # A proposer model's size over the target's, where the table says it (a replayed
    # surface; a launching job reads the models' config.json instead).
    size_ratio: dict[str, float] = field(default_factory=dict)

    def merged(self, more: OfflinePrices) -> OfflinePrices:
        """These prices with ``more`` (priced later, from another baseline) added."""
        unpriced = {k: v for k, v in self.unpriced.items() if k not in more.by_proposer}
        unpriced.update(more.unpriced)
        return OfflinePrices(
            {**self.by_proposer, **more.by_proposer},
            unpriced,
            "; ".join(b for b in (self.basis, more.basis) if b),
            self.seconds + more.seconds,
            {**self.size_ratio, **more.size_ratio},
        )

    def get(self, key: str, depth: int) -> OfflineAcceptance | None:
        return self.by_proposer.get(key, {}).get(depth)

    def to_json(self) -> dict[str, Any]:
        return {
            "by_proposer": {
                key: {
                    str(k): {
                        "per_position_acceptance": list(a.per_position_acceptance),
                        "num_drafts": a.num_drafts,
                        "num_draft_tokens": a.num_draft_tokens,
                        "num_accepted_tokens": a.num_accepted_tokens,
                        "num_rounds": a.num_rounds,
                        **_errors(a),
                    }
                    for k, a in depths.items()
                }
                for key, depths in self.by_proposer.items()
            },
            "unpriced": dict(self.unpriced),
            "size_ratio": dict(self.size_ratio),
            "basis": self.basis,
            "seconds": round(self.seconds, 3),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OfflinePrices:
        by: dict[str, dict[int, OfflineAcceptance]] = {}
        for key, depths in (d.get("by_proposer") or {}).items():
            by[key] = {}
            for k, a in depths.items():
                pp = tuple(float(x) for x in a["per_position_acceptance"])
                drafts = int(a.get("num_drafts") or 0)
                drafted = int(a.get("num_draft_tokens") or drafts * int(k))
                acc = int(a.get("num_accepted_tokens") or round(sum(pp) * drafts))
                se = a.get("acceptance_rate_se")
                pos = a.get("per_position_se")
                by[key][int(k)] = OfflineAcceptance(
                    int(k),
                    pp,
                    drafts,
                    drafted,
                    acc,
                    (),
                    None if se is None else float(se),
                    None if pos is None else tuple(float(x) for x in pos),
                    int(a.get("num_rounds") or 0),
                )
        return cls(
            by,
            dict(d.get("unpriced") or {}),
            str(d.get("basis") or ""),
            float(d.get("seconds") or 0),
            {k: float(v) for k, v in (d.get("size_ratio") or {}).items()},
        )


def _errors(a: OfflineAcceptance) -> dict[str, Any]:
    """A sampled price's standard errors, as stored (none for a greedy replay)."""
    out: dict[str, Any] = {}
    if a.acceptance_rate_se is not None:
        out["acceptance_rate_se"] = round(a.acceptance_rate_se, 5)
    if a.per_position_se is not None:
        out["per_position_se"] = [round(x, 5) for x in a.per_position_se]
    return out


def _on_machine(model: str) -> tuple[str, str | None]:
    """(what transformers loads, None) for a local path or a hub model cached with its
    weights; (model, why not) for a hub model that is not: pricing never downloads."""
    if not is_hub_id(model):
        return model, None
    view = local_view(model, weights=True)
    if view is None:
        return model, "not in the local Hugging Face cache with its weights"
    return str(view), None


def price_proposers(
    proposers: Mapping[str, Mapping[str, Any]],
    seqs: Sequence[TokenSequence],
    max_tokens: int,
    *,
    resolve: Callable[[str], str] = str,
    max_model_len: int | None = None,
    device: str = "cpu",
    target: str | None = None,
    sampling: Mapping[str, Any] | None = None,
) -> OfflinePrices:
    """``proposers``: key -> a configuration at the proposer's largest depth (method,
    draft or head, prompt_lookup_min/max, num_speculative_tokens); every depth up to it is
    priced. ``target``: the checkpoint that served ``seqs`` (the heads read its features;
    an MTP proposer's own checkpoint is its target). ``sampling``: the settings ``seqs``
    were sampled under (temperature > 0), None for greedy outputs."""
    t0 = time.monotonic()
    # An adaptive depth (SGLang) is picked per batch online from the acceptance it sees: a
    # replay at one fixed depth would price another configuration.
    adaptive = {
        k: "not priced offline: an adaptive depth is picked per batch while serving"
        for k, c in proposers.items()
        if c.get("adaptive") not in (None, ADAPTIVE_OFF)
    }
    proposers = {k: c for k, c in proposers.items() if k not in adaptive}
    sampled = bool(sampling and float(sampling.get("temperature") or 0) > 0)
    probs: TargetProbs | None = None
    if sampled and seqs:
        where, why = _on_machine(resolve(target)) if target else ("", "no target given")
        try:
            probs = TargetProbs(where, device) if why is None else None
        except (OSError, ValueError, RuntimeError, KeyError, ImportError) as e:
            why = f"did not load ({e})"
        if probs is None:
            reason = f"not priced offline under sampling: target {target}: {why}"
            return OfflinePrices({}, {**dict.fromkeys(proposers, reason), **adaptive}, "", 0.0)
    by: dict[str, dict[int, OfflineAcceptance]] = {}
    unpriced: dict[str, str] = dict(adaptive)
    drafts: dict[str, DraftGuesses] = {}
    heads: dict[str, tuple[str, str]] = {}
    shown: dict[str, str] = {}  # a cached snapshot's folder -> the hub id, for the reasons
    for key, c in proposers.items():
        if c.get("method") in HEAD_METHODS:
            head = str(c.get("head") or target or "")
            where, why = _on_machine(resolve(head))
            if why is None:
                heads[key] = (str(c["method"]), where)
                shown[where] = head
            else:
                unpriced[key] = f"not priced offline: {c['method']} head {head}: {why}"
    guesses: dict[str, Any] = {}
    if heads and seqs:
        if target is None:
            unpriced.update({k: "not priced offline: no target checkpoint given" for k in heads})
        elif (got := _on_machine(resolve(target)))[1] is not None:
            unpriced.update({k: f"not priced offline: target {target}: {got[1]}" for k in heads})
        else:
            shown[got[0]] = target
            depth = max(int(proposers[k].get("num_speculative_tokens") or 1) for k in heads)
            guesses, why_not = head_guesses(heads, got[0], seqs, depth, device)
            for k, r in why_not.items():
                for where, name in shown.items():
                    r = r.replace(where, name) if where != name else r
                unpriced[k] = f"not priced offline: {r}"
    for key, c in proposers.items():
        method, top = c.get("method"), int(c.get("num_speculative_tokens") or 0)
        if not seqs:
            unpriced[key] = "not priced offline: the baseline returned no token ids"
            continue
        if method == "ngram":
            lo, hi = int(c["prompt_lookup_min"]), int(c["prompt_lookup_max"])

            def propose(n: int, full: tuple[int, ...], ctx: int, k: int, lo=lo, hi=hi):
                return ngram_propose(full[:ctx], k, lo, hi, max_model_len)

        elif method == "draft_model" and c.get("draft"):
            path, why = _on_machine(resolve(str(c["draft"])))
            if why is not None:
                unpriced[key] = f"not priced offline: draft {c['draft']}: {why}"
                continue
            if probs is not None and sampling and c.get("draft_sample_method") == "probabilistic":
                try:
                    betas = overlaps(path, seqs, probs, sampling, device)
                except (OSError, ValueError, RuntimeError, KeyError, ImportError, IndexError) as e:
                    unpriced[key] = f"not priced offline: draft {c['draft']} did not load ({e})"
                    continue
                by[key] = price_probabilistic(seqs, top, max_tokens, betas)
                continue
            if sampled:
                try:
                    propose = draft_chains(path, seqs, top, max_tokens, device)
                except (OSError, ValueError, RuntimeError, KeyError, ImportError, IndexError) as e:
                    unpriced[key] = f"not priced offline: draft {c['draft']} did not load ({e})"
                    continue
            elif path not in drafts:
                try:
                    drafts[path] = DraftGuesses(path, seqs, device)
                # A missing or foreign checkpoint, an architecture transformers cannot
                # build, no memory for it, a vocabulary the target's ids overrun: unpriced.
                except (OSError, ValueError, RuntimeError, KeyError, ImportError, IndexError) as e:
                    unpriced[key] = f"not priced offline: draft {c['draft']} did not load ({e})"
                    continue
            if not sampled:
                propose = drafts[path].propose
        elif method == "suffix":
            if (why := suffix_trees_missing()) is not None:
                unpriced[key] = f"not priced offline: suffix decoding: {why}"
                continue
            if sampled:
                unpriced[key] = "not priced offline: suffix decoding under sampling"
                continue
            # A fresh cache per depth: the global tree must see the requests once, in order.
            note = () if c.get("max_cached_requests") == 0 else (GLOBAL_TREE_NOTE,)
            fresh = [SuffixReplay(dict(c), max_model_len) for _ in range(top)]
            by[key] = {
                k: replace(replay_rounds(seqs, k, max_tokens, r.propose), notes=note)
                for k, r in enumerate(fresh, 1)
            }
            continue
        elif key in guesses:
            propose = guesses[key].propose
        else:
            unpriced.setdefault(key, f"not priced offline: method {method!r}")
            continue
        if probs is not None and sampling is not None:
            by[key] = price_sampled(seqs, top, max_tokens, propose, probs, sampling)
        else:
            by[key] = {k: replay_rounds(seqs, k, max_tokens, propose) for k in range(1, top + 1)}
    tokens = sum(len(s.output) for s in seqs)
    kind = "greedy"
    if sampled and sampling is not None:
        kind = "sampled (" + ", ".join(f"{k} {v}" for k, v in sampling.items()) + ")"
    basis = f"{len(seqs)} {kind} baseline outputs ({tokens} tokens)"
    return OfflinePrices(by, unpriced, basis, time.monotonic() - t0)
