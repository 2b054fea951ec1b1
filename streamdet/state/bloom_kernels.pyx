# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The split-block Bloom filter's two loops (state.bloom), compiled: adding a segment's
grams and testing a batch's grams against a segment's filter.

Each gram costs a multiply, four 12-bit fields and four words of one cache line, so in
numpy the work is a dozen passes over temporaries the size of the batch (the remix, the
block, four masks through a table, a gather and a compare per word), once per segment the
batch is tested against. Here it is one pass, with nothing allocated but the answer.

The layout is state.bloom's, bit for bit (the filters are persisted): a gram's block is
((gram >> 32) * blocks) >> 32, and word w of it takes bits (f >> 6) and (f & 63) of the
12-bit field f at bit 52 - 12w of gram * REMIX (mod 2**64).
"""

import numpy as np

from libc.stdint cimport uint64_t

cdef uint64_t REMIX = 0x9E3779B97F4A7C15ULL


cdef inline uint64_t _first_word(uint64_t gram, uint64_t n_blocks) noexcept nogil:
    return (((gram >> 32) * n_blocks) >> 32) << 2


cdef inline uint64_t _mask(uint64_t mixed, int w) noexcept nogil:
    cdef uint64_t field = (mixed >> (52 - 12 * w)) & 0xFFF
    return (<uint64_t>1 << (field >> 6)) | (<uint64_t>1 << (field & 63))


def add(uint64_t[::1] words, uint64_t n_blocks, grams) -> None:
    """Set the bits of `grams` (uint64, any order) in the filter's `words`."""
    cdef const uint64_t[::1] g = np.ascontiguousarray(grams, dtype=np.uint64)
    cdef Py_ssize_t i
    cdef uint64_t first, mixed
    cdef int w
    with nogil:
        for i in range(g.shape[0]):
            first = _first_word(g[i], n_blocks)
            mixed = g[i] * REMIX
            for w in range(4):
                words[first + w] |= _mask(mixed, w)


def test(const uint64_t[::1] words, uint64_t n_blocks, grams):
    """A bool array: False where a gram of `grams` (uint64) is certainly absent."""
    cdef const uint64_t[::1] g = np.ascontiguousarray(grams, dtype=np.uint64)
    out_a = np.zeros(g.shape[0], dtype=np.bool_)
    cdef unsigned char[::1] out = out_a.view(np.uint8)
    cdef Py_ssize_t i
    cdef uint64_t first, mixed, m
    cdef int w
    cdef bint ok
    with nogil:
        for i in range(g.shape[0]):
            first = _first_word(g[i], n_blocks)
            mixed = g[i] * REMIX
            ok = True
            for w in range(4):
                m = _mask(mixed, w)
                if words[first + w] & m != m:
                    ok = False
                    break
            out[i] = ok
    return out_a
