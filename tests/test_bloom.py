"""The split-block Bloom filter's compiled loops against the layout written out in numpy.

The filters are persisted (segment files, the `segs` table), so the compiled add must set
exactly the bits the layout names, for any filter size; and a test must answer exactly as
reading those bits does."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.state.bloom import Probe, SplitBlockBloom

_REMIX = np.uint64(0x9E3779B97F4A7C15)


def _first_words(grams: np.ndarray, n_blocks: int) -> np.ndarray:
    block = ((grams >> np.uint64(32)) * np.uint64(n_blocks)) >> np.uint64(32)
    return (block * np.uint64(4)).astype(np.int64)


def _masks(grams: np.ndarray) -> list[np.ndarray]:
    """Word w's mask: bits (f >> 6) and (f & 63) of the 12-bit field f at 52 - 12w of the
    remixed gram."""
    mixed = grams * _REMIX
    out = []
    for w in range(4):
        f = (mixed >> np.uint64(52 - 12 * w)) & np.uint64(0xFFF)
        out.append((np.uint64(1) << (f >> np.uint64(6))) | (np.uint64(1) << (f & np.uint64(63))))
    return out


def ref_add(words: np.ndarray, grams: np.ndarray) -> None:
    first = _first_words(grams, len(words) // 4)
    for w, m in enumerate(_masks(grams)):
        np.bitwise_or.at(words, first + w, m)


def ref_test(words: np.ndarray, grams: np.ndarray) -> np.ndarray:
    first = _first_words(grams, len(words) // 4)
    ok = np.ones(len(grams), dtype=bool)
    for w, m in enumerate(_masks(grams)):
        ok &= (words[first + w] & m) == m
    return ok


grams_st = st.lists(st.integers(0, 2**64 - 1), max_size=300).map(
    lambda xs: np.asarray(sorted(set(xs)), dtype=np.uint64))


@settings(max_examples=150, deadline=None)
@given(grams_st, grams_st, st.integers(1, 5000))
def test_compiled_filter_sets_and_reads_the_layouts_bits(added, probed, n_keys):
    bloom = SplitBlockBloom.sized(n_keys)
    bloom.add_sorted(added)
    words = np.zeros_like(bloom.words)
    ref_add(words, added)
    assert np.array_equal(bloom.words, words)
    assert bloom.may_contain(Probe(added)).all()  # no false negatives
    assert np.array_equal(bloom.may_contain(Probe(probed)), ref_test(words, probed))


def test_a_filter_read_back_from_bytes_answers_the_same():
    rng = np.random.default_rng(7)
    grams = np.sort(rng.integers(0, 2**63, 50_000, dtype=np.uint64) * np.uint64(2))
    other = rng.integers(0, 2**63, 200_000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    bloom = SplitBlockBloom.build(grams)
    again = SplitBlockBloom.from_bytes(bloom.to_bytes())
    assert np.array_equal(again.may_contain(Probe(other)), ref_test(bloom.words, other))
    rate = again.may_contain(Probe(other)).mean()
    assert 0 < rate < 0.002  # ~0.016% at 24 bits a key: the layout kept its spread
