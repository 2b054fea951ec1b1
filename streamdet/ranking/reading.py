"""The ranking's inputs from a `streamdet run` state: the rows `streamdet dump` prints
(with clusters, pop(d) and contains) and the partial-duplicate pairs, and the newest
verdict of every label in the review desk's store."""

from __future__ import annotations

from collections.abc import Iterable

from ..reading.views import dump_rows, partial_pairs
from ..review.labels import Label
from ..state.txn import Store
from .features import Corpus


def corpus_of(store: Store) -> Corpus:
    """Every live page of the state, as the signals read it (no spans and no diagonals:
    the signals use none, and decoding every text, or finding every pair's diagonals,
    would cost more than the rest together)."""
    return Corpus(dump_rows(store, spans=False), partial_pairs(store))


def verdicts_of(labels: Iterable[Label]) -> dict[str, str]:
    """URL -> its newest verdict, from labels oldest first (a later label supersedes)."""
    return {lab.url: lab.verdict for lab in sorted(labels, key=lambda lab: lab.id)}
