"""The ranking's inputs from a `streamdet run` state or worker states: the rows `streamdet
dump` prints (with clusters, pop(d) and contains) and the partial-duplicate pairs, and the
newest verdict of every label in the review desk's store or, on worker states, in their
doc shards."""

from __future__ import annotations

from collections.abc import Iterable

from ..engine.spam_model import judged
from ..reading.shards import state_rows
from ..reading.states import open_store, state_dirs
from ..reading.views import dump_rows, partial_pairs
from ..review.labels import Label
from ..state.txn import Store
from .features import Corpus


def corpus_of(store: Store) -> Corpus:
    """Every live page of the state, as the signals read it (no spans and no diagonals:
    the signals use none, and decoding every text, or finding every pair's diagonals,
    would cost more than the rest together)."""
    return Corpus(dump_rows(store, spans=False), partial_pairs(store))


def pipeline_corpus(states: list[str]) -> Corpus:
    """Every live page of worker states' shards, as corpus_of reads a `streamdet run`
    state: the rows across the doc shards (clusters from the cluster shard, pop(d) and
    contains from the gram shards), each doc shard's pairs (each kept by its owner)."""
    pairs: list[dict] = []
    for path in state_dirs(states, partial=False)[0]:
        store = open_store(path, must_exist=True, read_only=True)
        try:
            pairs += partial_pairs(store)
        finally:
            store.close()
    return Corpus(state_rows(states, spans=False), pairs)


def pipeline_verdicts(states: list[str]) -> dict[str, str]:
    """The verdicts worker states' doc shards hold (each its own pages': the labels
    topic's, as the workers applied them; engine.spam_labels)."""
    out: dict[str, str] = {}
    for path in state_dirs(states, partial=False)[0]:
        store = open_store(path, must_exist=True, read_only=True)
        try:
            out |= judged(store.begin().chunks)
        finally:
            store.close()
    return out


def verdicts_of(labels: Iterable[Label]) -> dict[str, str]:
    """URL -> its newest verdict, from labels oldest first (a later label supersedes)."""
    return {lab.url: lab.verdict for lab in sorted(labels, key=lambda lab: lab.id)}
