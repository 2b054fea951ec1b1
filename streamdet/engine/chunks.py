"""Paragraph chunks (SPEC §8, after Ardi & Heidemann): the paragraphs of a page's visible
text, each keyed by its token sequence, for the labelled set L and contains(L, f).

A paragraph is a line of the visible text: the text of a block element (engine.text puts
a line break around every block, so nested blocks give the text between their
boundaries), or a line of a `text` record. Its key is a hash of its tokens (SPEC §1), the
same polynomial as a sentence's (engine.sentences.run_keys), so two paragraphs with the
same words have the same key however their markup or spacing differ.

A chunk of fewer than MIN_TOKENS tokens, or whose key is in the user's stop list
(`--stop-chunks`), is a *stop chunk*: it is never in L and does not count in contains'
denominator. A page keeps only its other chunks, as distinct keys with their number of
occurrences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .grams import token_hashes
from .sentences import LINE_BREAKS, cuts_before, run_keys, runs
from .sorting import sorted_unique
from .tokens import token_spans

MIN_TOKENS = 3  # SPEC §8: a chunk of fewer tokens is a stop chunk

_LINE_CUTS = np.array(sorted(map(ord, LINE_BREAKS)), dtype=np.uint32)


@dataclass(frozen=True, eq=False)  # arrays: compare their contents, not the objects
class Chunks:
    """A page's chunks that are not stop chunks: sorted distinct keys, occurrences."""

    keys: np.ndarray  # uint64
    counts: np.ndarray  # uint32, same length

    def __len__(self) -> int:
        return len(self.keys)

    def total(self) -> int:
        """Chunk occurrences that are not stop chunks: contains' denominator."""
        return int(self.counts.sum())

    def encode(self) -> bytes:
        """A u32 count, then the keys (u64) and occurrences (u32): never empty, so that a
        record of a page without chunks tells it from a page never counted."""
        n = np.asarray([len(self.keys)], dtype="<u4")
        return b"".join((n.tobytes(), self.keys.astype("<u8").tobytes(),
                         self.counts.astype("<u4").tobytes()))

    @classmethod
    def decode(cls, raw: bytes | None) -> Chunks:
        if not raw:
            return NO_CHUNKS
        n = int(np.frombuffer(raw, dtype="<u4", count=1)[0])
        keys = np.frombuffer(raw, dtype="<u8", count=n, offset=4).astype(np.uint64)
        counts = np.frombuffer(raw, dtype="<u4", count=n, offset=4 + 8 * n).astype(np.uint32)
        return cls(keys, counts)

    def part(self, keep: np.ndarray) -> Chunks:
        """The chunks a boolean mask keeps (a shard's share)."""
        return Chunks(self.keys[keep], self.counts[keep])


NO_CHUNKS = Chunks(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint32))


def line_keys(text: str, hashes: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The key of every line of `text` that has at least MIN_TOKENS tokens, in order, from
    its tokens' hashes (engine.grams.token_hashes) and start offsets."""
    if len(hashes) < MIN_TOKENS:
        return np.zeros(0, dtype=np.uint64)
    first, stop = runs(cuts_before(text, starts, _LINE_CUTS))
    keep = stop - first >= MIN_TOKENS
    return run_keys(hashes, first[keep], stop[keep])


def page_chunks(text: str, hashes: np.ndarray, starts: np.ndarray,
                stop: np.ndarray) -> Chunks:
    """A page's chunks that are not stop chunks; `stop` holds the stop list's keys."""
    keys = line_keys(text, hashes, starts)
    if len(stop) and len(keys):
        keys = keys[~np.isin(keys, stop)]
    if not len(keys):
        return NO_CHUNKS
    distinct, counts = np.unique(keys, return_counts=True)
    return Chunks(distinct.astype(np.uint64), counts.astype(np.uint32))


def text_keys(text: str) -> np.ndarray:
    """Sorted distinct keys of the chunks of a text (a stop list, or a text a user labels):
    each line is a chunk, those of fewer than MIN_TOKENS tokens left out."""
    tokens, starts, _ = token_spans(text)
    return sorted_unique(line_keys(text, token_hashes(tokens), starts)).astype(np.uint64)
