"""Offline acceptance: what each proposer would have accepted on the baseline's own
greedy outputs, priced before any speculative launch (``price``)."""

from tuner.offline._draft import DraftGuesses
from tuner.offline._heads import HEAD_METHODS, HeadGuesses, head_guesses
from tuner.offline._ngram import ngram_propose
from tuner.offline._price import UNPRICED_OTHER_TARGET, OfflinePrices, price_proposers
from tuner.offline._rounds import OfflineAcceptance, TokenSequence, replay_rounds

__all__ = [
    "HEAD_METHODS",
    "UNPRICED_OTHER_TARGET",
    "DraftGuesses",
    "HeadGuesses",
    "OfflineAcceptance",
    "OfflinePrices",
    "TokenSequence",
    "head_guesses",
    "ngram_propose",
    "price_proposers",
    "replay_rounds",
]
