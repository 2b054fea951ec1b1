# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A compiled map of grams (uint64) to small ints, answered and written a batch at a time.

A transaction knows the posting of every gram its batch reaches (state.txn), and a
batch's known grams (hundreds a page once copies pile up) pass through that map several
times on their way from the lookups to the commit. In a Python dict each gram would cost
a hash probe and an object per lookup and per write; here a gram maps to the id of its
posting (postings are interned: a passage's grams share one), and a whole array of grams
is looked up, or given one id or an id each, in one call.

Open addressing with linear probing over power-of-two arrays, grown at half full; a
gram's slot is the top bits of the gram times an odd multiplier drawn at random for each
table. Grams are hashes of the page's words, which a hostile page can choose: with a
fixed multiplier it could bring many grams to one run of slots, and each probe would
walk the run (quadratic in the grams); a multiplier it cannot know keeps the runs short
(SPEC §9). Entries are never removed (a transaction's table lives for one batch).
"""

import secrets

import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from streamdet.engine.hash_tables cimport home, table_bits


cdef class GramTable:
    """gram -> int32 value; lookups answer -1 for a gram not in the table."""

    cdef uint64_t[::1] _keys
    cdef int32_t[::1] _values
    cdef uint8_t[::1] _used
    cdef int _shift
    cdef Py_ssize_t _n
    cdef uint64_t _mix

    def __init__(self, Py_ssize_t capacity=1024):
        self._mix = secrets.randbits(64) | 1
        self._alloc(table_bits(capacity, 4))

    cdef void _alloc(self, int bits):
        size = 1 << bits
        self._keys = np.zeros(size, dtype=np.uint64)
        self._values = np.zeros(size, dtype=np.int32)
        self._used = np.zeros(size, dtype=np.uint8)
        self._shift = 64 - bits
        self._n = 0

    def __len__(self) -> int:
        return self._n

    cdef inline Py_ssize_t _home(self, uint64_t key) noexcept nogil:
        """The slot `key`'s probe starts at: its top bits times the table's multiplier."""
        return home(key, self._mix, self._shift)

    cdef inline Py_ssize_t _slot(self, uint64_t key) noexcept nogil:
        """The slot holding `key`, or the empty one where it would go."""
        cdef Py_ssize_t mask = self._keys.shape[0] - 1
        cdef Py_ssize_t i = self._home(key)
        while self._used[i] and self._keys[i] != key:
            i = (i + 1) & mask
        return i

    cdef void _reserve(self, Py_ssize_t more):
        """Room for `more` new entries at under half full (rehashing everything)."""
        if 2 * (self._n + more) <= self._keys.shape[0]:
            return
        old_keys, old_values, old_used = self._keys, self._values, self._used
        self._alloc(table_bits(self._n + more, 64 - self._shift))
        held = np.flatnonzero(np.asarray(old_used))
        self._put(np.asarray(old_keys)[held], np.asarray(old_values)[held])

    cdef void _put(self, const uint64_t[::1] keys, const int32_t[::1] values):
        cdef Py_ssize_t j, i
        with nogil:
            for j in range(keys.shape[0]):
                i = self._slot(keys[j])
                if not self._used[i]:
                    self._used[i] = 1
                    self._keys[i] = keys[j]
                    self._n += 1
                self._values[i] = values[j]

    def home(self, grams):
        """The slot each gram's probe starts at (int64): how the table spreads grams."""
        cdef const uint64_t[::1] g = np.ascontiguousarray(grams, dtype=np.uint64)
        out_a = np.empty(g.shape[0], dtype=np.int64)
        cdef int64_t[::1] out = out_a
        cdef Py_ssize_t j
        for j in range(g.shape[0]):
            out[j] = self._home(g[j])
        return out_a

    def lookup(self, grams):
        """The value of each gram (int32), -1 where the table has none."""
        cdef const uint64_t[::1] g = np.ascontiguousarray(grams, dtype=np.uint64)
        out_a = np.empty(g.shape[0], dtype=np.int32)
        cdef int32_t[::1] out = out_a
        cdef Py_ssize_t j, i
        with nogil:
            for j in range(g.shape[0]):
                i = self._slot(g[j])
                out[j] = self._values[i] if self._used[i] else -1
        return out_a

    def assign(self, grams, int32_t value) -> None:
        """Give every gram of `grams` the same value."""
        cdef const uint64_t[::1] g = np.ascontiguousarray(grams, dtype=np.uint64)
        self._reserve(g.shape[0])
        self._put(g, np.full(g.shape[0], value, dtype=np.int32))

    def assign_each(self, grams, values) -> None:
        """Give grams[i] the value values[i] (a gram given twice keeps the last)."""
        cdef const uint64_t[::1] g = np.ascontiguousarray(grams, dtype=np.uint64)
        cdef const int32_t[::1] v = np.ascontiguousarray(values, dtype=np.int32)
        if v.shape[0] != g.shape[0]:
            raise ValueError("assign_each: as many values as grams")
        self._reserve(g.shape[0])
        self._put(g, v)

    def contents(self):
        """(grams ascending uint64, their values int32)."""
        held = np.flatnonzero(np.asarray(self._used))
        keys = np.asarray(self._keys)[held]
        order = np.argsort(keys)
        return keys[order], np.asarray(self._values)[held][order]
