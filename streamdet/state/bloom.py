"""A register-blocked Bloom filter over 64-bit gram hashes, in numpy.

Each key sets K bits inside one 64-bit word: the word is chosen by the key's low bits and
the bits by K 6-bit fields of its high bits (gram hashes are already uniformly mixed, so
no further hashing is needed). A membership test is one gather and one AND per key,
vectorised over a whole batch, which is what lets the gram index skip every lookup of a
gram never seen before - most grams on the web.
"""

from __future__ import annotations

import numpy as np

K = 6
BITS_PER_KEY = 16  # ~0.5-1% false positives for a blocked filter with K=6
_ONE = np.uint64(1)
_SIX = np.uint64(63)


def probe_masks(grams: np.ndarray) -> np.ndarray:
    """The K-bit mask of each gram (the same whatever the filter's size)."""
    masks = np.zeros(len(grams), dtype=np.uint64)
    for i in range(K):
        masks |= _ONE << ((grams >> np.uint64(58 - 6 * i)) & _SIX)
    return masks


class BlockedBloom:
    def __init__(self, words: np.ndarray) -> None:
        if len(words) & (len(words) - 1):
            raise ValueError("a blocked bloom needs a power-of-two number of words")
        self.words = words
        self._mask = np.uint64(len(words) - 1)

    @classmethod
    def build(cls, grams: np.ndarray, masks: np.ndarray | None = None) -> BlockedBloom:
        n_words = 1 << max(0, int(np.ceil(np.log2(max(1, len(grams)) * BITS_PER_KEY / 64))))
        words = np.zeros(n_words, dtype=np.uint64)
        if len(grams):
            np.bitwise_or.at(words, grams & np.uint64(n_words - 1),
                             probe_masks(grams) if masks is None else masks)
        return cls(words)

    def may_contain(self, grams: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """False where a gram is certainly absent."""
        w = self.words[grams & self._mask]
        return (w & masks) == masks

    def to_bytes(self) -> bytes:
        return self.words.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, b: bytes) -> BlockedBloom:
        return cls(np.frombuffer(b, dtype="<u8").astype(np.uint64))

    @property
    def nbytes(self) -> int:
        return self.words.nbytes
