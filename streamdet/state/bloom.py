"""A register-blocked Bloom filter over 64-bit gram hashes, in numpy.

Each key sets K bits inside one 64-bit word: the word is chosen by the key's *high* bits
and the bits by K 6-bit fields of its low bits (gram hashes are already uniformly mixed, so
no further hashing is needed). Choosing the word by high bits means sorted keys - a
segment's grams are sorted - fall into words in order, so building is a run-length OR with
no sort. A membership test is one gather and one AND per key, vectorised over a whole
batch, which is what lets the gram index skip every lookup of a never-seen gram.
"""

from __future__ import annotations

import numpy as np

K = 6
BITS_PER_KEY = 16  # ~0.5% false positives for a blocked filter with K=6
MAX_WORD_BITS = 64 - 6 * K  # word index bits must not overlap the mask fields
_ONE = np.uint64(1)
_SIX = np.uint64(63)


def probe_masks(grams: np.ndarray) -> np.ndarray:
    """The K-bit mask of each gram (the same whatever the filter's size)."""
    masks = np.zeros(len(grams), dtype=np.uint64)
    for i in range(K):
        masks |= _ONE << ((grams >> np.uint64(6 * i)) & _SIX)
    return masks


class BlockedBloom:
    def __init__(self, words: np.ndarray) -> None:
        bits = len(words).bit_length() - 1
        if len(words) != 1 << bits or bits > MAX_WORD_BITS:
            raise ValueError("a blocked bloom needs a power-of-two number of words, <= 2^28")
        self.words = words
        self._shift = np.uint64(64 - bits) if bits else None

    def _word(self, grams: np.ndarray) -> np.ndarray:
        if self._shift is None:
            return np.zeros(len(grams), dtype=np.uint64)
        return grams >> self._shift

    @classmethod
    def build(cls, grams: np.ndarray) -> BlockedBloom:
        """A filter holding `grams` (sorted ascending)."""
        want = max(1, len(grams)) * BITS_PER_KEY / 64
        n_words = 1 << min(MAX_WORD_BITS, max(0, int(np.ceil(np.log2(want)))))
        bloom = cls(np.zeros(n_words, dtype=np.uint64))
        if len(grams):
            idx = bloom._word(grams)  # non-decreasing, as grams are sorted
            starts = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
            bloom.words[idx[starts]] = np.bitwise_or.reduceat(probe_masks(grams), starts)
        return bloom

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
