# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A page's known grams grouped by what they share, compiled (engine.postings), and the
grams a document gains numbered by first appearance (engine.documents).

The grams of a passage share one posting, so a page's ~400 known grams come in ~20
groups. Found in numpy they cost a dozen calls a page (a unique with its first places
and inverse, two argsorts, a count and a split); here they cost two, each linear in the
grams: the distinct postings in order of first appearance, then the grams' places
ordered by group.
"""

import secrets

import numpy as np

from libc.stdint cimport int32_t, int64_t, uint64_t

from streamdet.engine.hash_tables cimport home, table_bits

cdef uint64_t _MIX = secrets.randbits(64) | 1  # this process's (engine.hash_tables)


ctypedef fused value_t:
    int32_t
    uint64_t


def first_seen(const value_t[::1] values):
    """The distinct values in order of first appearance, and for each element the number
    of its value among them (an open-addressing table of the values seen,
    engine.hash_tables): posting ids of a page's grams, or the grams a document gains."""
    cdef Py_ssize_t n = values.shape[0], i, e, mask, n_distinct = 0
    cdef int bits = table_bits(n, 4)
    cdef Py_ssize_t size = <Py_ssize_t>1 << bits
    cdef value_t v
    mask = size - 1
    slots_a = np.full(size, -1, dtype=np.int64)  # table entry -> number of its value
    distinct_a = np.empty(n, dtype=np.int32 if value_t is int32_t else np.uint64)
    which_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] slots = slots_a
    cdef value_t[::1] distinct = distinct_a
    cdef int64_t[::1] which = which_a
    with nogil:
        for i in range(n):
            v = values[i]
            e = home(<uint64_t>v, _MIX, 64 - bits)
            while slots[e] >= 0 and distinct[slots[e]] != v:
                e = (e + 1) & mask
            if slots[e] < 0:
                slots[e] = n_distinct
                distinct[n_distinct] = v
                n_distinct += 1
            which[i] = slots[e]
    return distinct_a[:n_distinct].copy(), which_a


def by_group(const int64_t[::1] which, const int64_t[::1] to_group, Py_ssize_t n_groups):
    """The places 0 .. n - 1 ordered by their group (to_group[which[i]]), each group's in
    ascending order, and where each group's places end (a counting sort)."""
    cdef Py_ssize_t n = which.shape[0], i, g
    ends_a = np.zeros(n_groups, dtype=np.int64)
    order_a = np.empty(n, dtype=np.int64)
    fill_a = np.zeros(n_groups, dtype=np.int64)
    cdef int64_t[::1] ends = ends_a
    cdef int64_t[::1] order = order_a
    cdef int64_t[::1] fill = fill_a
    with nogil:
        for i in range(n):
            ends[to_group[which[i]]] += 1
        for g in range(1, n_groups):
            ends[g] += ends[g - 1]
        for g in range(1, n_groups):
            fill[g] = ends[g - 1]
        for i in range(n):
            g = to_group[which[i]]
            order[fill[g]] = i
            fill[g] += 1
    return order_a, ends_a
