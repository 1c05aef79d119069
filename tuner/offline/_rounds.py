"""vLLM's decode rounds replayed over a known greedy sequence: which drafted positions the
target would accept, counted as the engine's spec-decode counters count them.

Why a replay is exact for greedy traffic: speculation does not change greedy output, so the
speculative engine commits the same tokens the baseline returned. A round starts after the
tokens committed so far; the proposer drafts up to k tokens from that context; the target
accepts the longest prefix that equals its own next tokens and adds one (the bonus). vLLM
counts a round as a draft only when it drafted at least one token (an n-gram lookup that
finds no match drafts none), and position i as accepted when positions 1..i all were
(``SpecDecodingStats.observe_draft``). The first output token comes from the prefill, so
the first round starts after it; rounds stop once ``max_tokens`` are committed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["OfflineAcceptance", "TokenSequence", "replay_rounds"]


@dataclass(frozen=True)
class TokenSequence:
    """One request as the baseline served it: prompt and greedy output token ids. The
    output runs past the request's ``max_tokens`` by the space's largest depth, so the last
    round's drafts can be judged too (the engine counts those before it truncates)."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]
    max_tokens: int | None = None  # the request's own; else the caller's

    @classmethod
    def from_stored(cls, row: Sequence[Sequence[int]]) -> TokenSequence:
        """From ``[prompt ids, output ids, [max_tokens]]`` as a trial row stores it."""
        limit = int(row[2][0]) if len(row) > 2 and row[2] else None
        return cls(tuple(int(t) for t in row[0]), tuple(int(t) for t in row[1]), limit)

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.prompt + self.output


@dataclass(frozen=True)
class OfflineAcceptance:
    """Acceptance of one proposer at one depth predicted from the baseline's outputs,
    as vLLM's counters would read it; a prediction, never a measurement."""

    depth: int
    per_position_acceptance: tuple[float, ...]  # P(position i accepted), i = 1..depth
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Standard errors over the sampled sequences (``_sampled``: each a draw of the target's
    # distribution); None for a greedy replay, which is exact on its prompts.
    acceptance_rate_se: float | None = None
    per_position_se: tuple[float, ...] | None = None
    # Decode rounds walked, with a draft or without one (0: not known, an older price):
    # a round without a draft commits one token at the baseline's cost.
    num_rounds: int = 0

    @property
    def draft_share(self) -> float:
        """Share of rounds that drafted (1.0 when the rounds are not known)."""
        return self.num_drafts / self.num_rounds if self.num_rounds else 1.0

    @property
    def drafted_per_round(self) -> float | None:
        """Drafted tokens a round, drafts or not (None when the rounds are not known)."""
        return self.num_draft_tokens / self.num_rounds if self.num_rounds else None

    @property
    def acceptance_rate(self) -> float:
        """Accepted over drafted tokens, as vLLM's ``acceptance_rate``."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens one drafted step commits: the bonus plus the accepted ones."""
        return 1.0 + (self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0)


# proposer(sequence index, full token ids, context length, k) -> drafted token ids (<= k)
Proposer = Callable[[int, tuple[int, ...], int, int], Sequence[int]]


def replay_rounds(
    seqs: Sequence[TokenSequence], k: int, max_tokens: int, propose: Proposer
) -> OfflineAcceptance:
    """Walk every sequence's decode rounds at depth ``k`` with ``propose``."""
    drafts = drafted = accepted = rounds = 0
    per_pos = [0] * k
    for n, s in enumerate(seqs):
        full, p = s.tokens, len(s.prompt)
        limit = min(s.max_tokens or max_tokens, len(s.output))
        committed = 1  # the prefill's token
        while committed < limit:
            ctx = p + committed
            rounds += 1
            guess = list(propose(n, full, ctx, k))[:k]
            if not guess:
                committed += 1
                continue
            a = 0
            while a < len(guess) and ctx + a < len(full) and guess[a] == full[ctx + a]:
                a += 1
            drafts += 1
            drafted += len(guess)
            accepted += a
            for i in range(a):
                per_pos[i] += 1
            committed += a + 1
    rates = tuple(c / drafts if drafts else 0.0 for c in per_pos)
    return OfflineAcceptance(k, rates, drafts, drafted, accepted, num_rounds=rounds)
