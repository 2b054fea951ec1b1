"""A register-blocked Bloom filter over 64-bit gram hashes, in numpy.

Each key sets K bits inside one 64-bit word: the word is chosen by the key's *high* bits
and the bits by K 6-bit fields of its low bits (gram hashes are already uniformly mixed, so
no further hashing is needed). The word is the top 28 bits scaled to the number of words
(multiply and shift, so any number of words works: rounding it up to a power of two cost
up to twice the bits per key). Choosing the word by high bits means sorted keys - a
segment's grams are sorted - fall into words in order, so building is a run-length OR with
no sort. A membership test is one gather and one AND per key, vectorised over a whole
batch, which is what lets the gram index skip every lookup of a never-seen gram.
"""

from __future__ import annotations

import numpy as np

K = 6
# ~0.1% false positives for a blocked filter with K=6 (16 bits: ~0.4%). Every false
# positive is a chunk read from a segment, and at 500,000 documents (18 segments, most of
# them old and out of the page cache) those were ~150 reads a page beside ~90 true ones;
# 24 bits cut them 4x (counted at 30,000 documents: 58 -> 15 a page) for 1 more byte of
# RAM per pair. Filters written with another size stay readable (the size is implicit).
BITS_PER_KEY = 24
WORD_BITS = 64 - 6 * K  # the key bits that choose the word: not those of the mask fields
MAX_WORDS = 1 << WORD_BITS
_ONE = np.uint64(1)
_SIX = np.uint64(63)
_TOP = np.uint64(64 - WORD_BITS)


def probe_masks(grams: np.ndarray) -> np.ndarray:
    """The K-bit mask of each gram (the same whatever the filter's size)."""
    masks = np.zeros(len(grams), dtype=np.uint64)
    for i in range(K):
        masks |= _ONE << ((grams >> np.uint64(6 * i)) & _SIX)
    return masks


class BlockedBloom:
    def __init__(self, words: np.ndarray) -> None:
        if not 1 <= len(words) <= MAX_WORDS:
            raise ValueError(f"a blocked bloom has 1 to {MAX_WORDS} words")
        self.words = words
        self._n = np.uint64(len(words))

    def _word(self, grams: np.ndarray) -> np.ndarray:
        """(top WORD_BITS bits) * words / 2**WORD_BITS: exact in 64 bits, non-decreasing."""
        return ((grams >> _TOP) * self._n) >> np.uint64(WORD_BITS)

    @classmethod
    def sized(cls, n_keys: int) -> BlockedBloom:
        """An empty filter sized for n_keys."""
        n_words = min(MAX_WORDS, max(1, -(-n_keys * BITS_PER_KEY // 64)))
        return cls(np.zeros(n_words, dtype=np.uint64))

    @classmethod
    def build(cls, grams: np.ndarray) -> BlockedBloom:
        """A filter holding `grams` (sorted ascending)."""
        bloom = cls.sized(len(grams))
        bloom.add_sorted(grams)
        return bloom

    def add_sorted(self, grams: np.ndarray) -> None:
        """Add grams sorted ascending (so a merge can fill a filter slice by slice)."""
        if len(grams):
            idx = self._word(grams)  # non-decreasing, as grams are sorted
            starts = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
            self.words[idx[starts]] |= np.bitwise_or.reduceat(probe_masks(grams), starts)

    def may_contain(self, grams: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """False where a gram is certainly absent."""
        w = self.words[self._word(grams)]
        return (w & masks) == masks

    def to_bytes(self) -> bytes:
        return self.words.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, b: bytes) -> BlockedBloom:
        return cls(np.frombuffer(b, dtype="<u8").astype(np.uint64))

    @property
    def nbytes(self) -> int:
        return self.words.nbytes
