# cython: language_level=3
"""Open addressing over power-of-two arrays, as the compiled tables use it
(state.gram_table, engine.grouping, engine.pair_kernels), inlined into each.

A key's first slot is the top bits of the key times an odd multiplier drawn at random
(by each table, or each process): grams and slot lists come from pages, which a hostile
page can choose, and with a multiplier it could know it would bring many keys to one run
of slots, each probe walking the run (quadratic in the keys, SPEC §9).
"""

from libc.stdint cimport uint64_t


cdef inline int table_bits(Py_ssize_t n, int bits) noexcept nogil:
    """The fewest bits, from `bits` up, whose power of two holds n keys at most half
    full."""
    while (<Py_ssize_t>1 << bits) < 2 * n:
        bits += 1
    return bits


cdef inline Py_ssize_t home(uint64_t key, uint64_t mix, int shift) noexcept nogil:
    """The slot a key's probe starts at: the top 64 - `shift` bits of key x mix."""
    return <Py_ssize_t>((key * mix) >> shift)


cdef inline uint64_t scramble(uint64_t h) noexcept nogil:
    """A bijection of 64 bits that spreads every input bit over all of them (MurmurHash3's
    finaliser): one step of a keyed hash over a list of values."""
    h ^= h >> 33
    h *= 0xff51afd7ed558ccdULL
    h ^= h >> 33
    h *= 0xc4ceb9fe1a85ec53ULL
    h ^= h >> 33
    return h
