"""Bloom filters over 64-bit gram hashes: one per gram-index segment.

A segment's filter is what lets a lookup skip it: a gram no filter admits was never seen
and costs no read at all, and each false positive costs a chunk read from a segment that
does not hold the gram. At 500,000 documents most segments are old and no longer in the
page cache, where such a read costs ~250 us, so the false-positive rate matters as much as
the cost of a probe. Two layouts, both choosing a key's block by its *high* bits (scaled to
the number of blocks: a multiply and a shift, so any size works), so that a segment's
sorted grams fall into blocks in order and building is a run-length OR with no sort:

- `SplitBlockBloom` (written since state format 6): a block of 4 words (256 bits, in one
  cache line); a key sets 2 bits in each word, taken from a multiplicative remix of the
  key (odd, 0x9E3779B97F4A7C15: a bijection mixing low bits into high ones). 0.016%
  false positives at 24 bits a key, against 0.11% for the layout below with the same
  memory. A probe reads every key's first word, and the other three only for the ~8%
  that pass it: as cheap as the one-word layout but for those few. Adding and testing are
  one compiled pass each (state.bloom_kernels).
- `BlockedBloom` (state formats up to 5, still read): a key sets K = 6 bits, from 6-bit
  fields of its low bits, in one 64-bit word.

A membership test is vectorised over a whole batch (`Probe` holds what every filter of a
state tests the batch's grams with, computed once per batch, not once per segment).
"""

from __future__ import annotations

import numpy as np

from . import bloom_kernels

K = 6
# ~0.1% false positives for the one-word layout with K=6 (16 bits: ~0.4%), 0.016% for
# the split-block one. +1 byte of RAM per pair over 16 bits; filters written with another
# size stay readable (the size is implicit).
BITS_PER_KEY = 24
WORD_BITS = 64 - 6 * K  # the key bits that choose the word: not those of the mask fields
MAX_WORDS = 1 << WORD_BITS
_ONE = np.uint64(1)
_SIX = np.uint64(63)
_TOP = np.uint64(64 - WORD_BITS)

BLOCK_WORDS = 4  # split-block layout: words per block (_first_word shifts by 2)
BITS_PER_WORD = 2  # two 6-bit fields of a 12-bit one a word (state.bloom_kernels)
BLOCK_BITS = 32  # the key bits that choose the block
MAX_BLOCKS = 1 << BLOCK_BITS
_BLOCK_TOP = np.uint64(64 - BLOCK_BITS)


def probe_masks(grams: np.ndarray) -> np.ndarray:
    """The K-bit mask of each gram in the one-word layout (whatever the filter's size)."""
    masks = np.zeros(len(grams), dtype=np.uint64)
    for i in range(K):
        masks |= _ONE << ((grams >> np.uint64(6 * i)) & _SIX)
    return masks


class Probe:
    """A batch's grams and their masks for each layout, computed when first needed and
    then shared by every segment's filter."""

    def __init__(self, grams: np.ndarray) -> None:
        self.grams = grams
        self._word_masks: np.ndarray | None = None
        self._top: np.ndarray | None = None

    @property
    def top(self) -> np.ndarray:
        """The bits that choose a gram's block in the split-block layout."""
        if self._top is None:
            self._top = self.grams >> _BLOCK_TOP
        return self._top

    @property
    def word_masks(self) -> np.ndarray:
        if self._word_masks is None:
            self._word_masks = probe_masks(self.grams)
        return self._word_masks


class _Words:
    """What both layouts share: an array of 64-bit words, built from sorted keys, stored as
    its little-endian bytes."""

    def __init__(self, words: np.ndarray) -> None:
        self.words = words

    @classmethod
    def sized(cls, n_keys: int):
        raise NotImplementedError

    def add_sorted(self, grams: np.ndarray) -> None:
        raise NotImplementedError

    @classmethod
    def build(cls, grams: np.ndarray):
        """A filter holding `grams` (sorted ascending)."""
        bloom = cls.sized(len(grams))
        bloom.add_sorted(grams)
        return bloom

    def to_bytes(self) -> bytes:
        return self.words.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, b: bytes):
        return cls(np.frombuffer(b, dtype="<u8").astype(np.uint64))

    @property
    def nbytes(self) -> int:
        return self.words.nbytes


class SplitBlockBloom(_Words):
    def __init__(self, words: np.ndarray) -> None:
        n_blocks = len(words) // BLOCK_WORDS
        if len(words) % BLOCK_WORDS or not 1 <= n_blocks <= MAX_BLOCKS:
            raise ValueError(f"a split-block bloom has 1 to {MAX_BLOCKS} blocks of "
                             f"{BLOCK_WORDS} words")
        super().__init__(words)
        self._n = np.uint64(n_blocks)

    def _first_word(self, top: np.ndarray) -> np.ndarray:
        """Index of each gram's block's first word (non-decreasing in the gram), from the
        gram's top BLOCK_BITS bits: (top * blocks) >> BLOCK_BITS is its block."""
        block = (top * self._n) >> np.uint64(BLOCK_BITS)
        return (block << np.uint64(2)).view(np.int64)  # x BLOCK_WORDS; < 2**34: a fine index

    @classmethod
    def sized(cls, n_keys: int) -> SplitBlockBloom:
        """An empty filter sized for n_keys."""
        return cls(np.zeros(cls.words_for(n_keys), dtype=np.uint64))

    def add_sorted(self, grams: np.ndarray) -> None:
        """Add grams sorted ascending (so a merge can fill a filter slice by slice, and a
        mapped one drop the words behind it); one compiled pass (state.bloom_kernels)."""
        bloom_kernels.add(self.words, self._n, grams)

    @classmethod
    def words_for(cls, n_keys: int) -> int:
        """Words of a filter sized for n_keys."""
        per_block = 64 * BLOCK_WORDS
        return min(MAX_BLOCKS, max(1, -(-n_keys * BITS_PER_KEY // per_block))) * BLOCK_WORDS

    def first_words(self, probe: Probe) -> np.ndarray:
        """Each probed gram's block's first word: non-decreasing when the grams are sorted,
        which lets a mapped filter be read a window at a time (state.segments)."""
        return self._first_word(probe.top)

    def may_contain(self, probe: Probe) -> np.ndarray:
        """False where a gram is certainly absent."""
        return self.test(probe.grams)

    def test(self, grams: np.ndarray) -> np.ndarray:
        """may_contain for grams (uint64): one compiled pass (state.bloom_kernels)."""
        return bloom_kernels.test(self.words, self._n, grams)


class BlockedBloom(_Words):
    def __init__(self, words: np.ndarray) -> None:
        if not 1 <= len(words) <= MAX_WORDS:
            raise ValueError(f"a blocked bloom has 1 to {MAX_WORDS} words")
        super().__init__(words)
        self._n = np.uint64(len(words))

    def _word(self, grams: np.ndarray) -> np.ndarray:
        """(top WORD_BITS bits) * words / 2**WORD_BITS: exact in 64 bits, non-decreasing."""
        return ((grams >> _TOP) * self._n) >> np.uint64(WORD_BITS)

    @classmethod
    def sized(cls, n_keys: int) -> BlockedBloom:
        """An empty filter sized for n_keys."""
        n_words = min(MAX_WORDS, max(1, -(-n_keys * BITS_PER_KEY // 64)))
        return cls(np.zeros(n_words, dtype=np.uint64))

    def add_sorted(self, grams: np.ndarray) -> None:
        """Add grams sorted ascending (so a merge can fill a filter slice by slice)."""
        if len(grams):
            idx = self._word(grams)  # non-decreasing, as grams are sorted
            starts = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
            self.words[idx[starts]] |= np.bitwise_or.reduceat(probe_masks(grams), starts)

    def may_contain(self, probe: Probe) -> np.ndarray:
        """False where a gram is certainly absent."""
        masks = probe.word_masks
        w = self.words[self._word(probe.grams)]
        return (w & masks) == masks


Filter = SplitBlockBloom | BlockedBloom
