"""Offline acceptance: what each proposer would have accepted on the baseline's own
greedy outputs, priced before any speculative launch (``price``)."""

from tuner.offline._draft import DraftGuesses
from tuner.offline._ngram import ngram_propose
from tuner.offline._price import UNPRICED_HEADS, OfflinePrices, price_proposers
from tuner.offline._rounds import OfflineAcceptance, TokenSequence, replay_rounds

__all__ = [
    "UNPRICED_HEADS",
    "DraftGuesses",
    "OfflineAcceptance",
    "OfflinePrices",
    "TokenSequence",
    "ngram_propose",
    "price_proposers",
    "replay_rounds",
]
