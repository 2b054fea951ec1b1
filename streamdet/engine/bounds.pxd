# cython: language_level=3
"""Binary searches over ascending uint64 memoryviews, inlined into the kernels that
cimport them (engine.greedy, engine.pair_kernels): a source's pairs are one range of
pairs sorted by source."""

from libc.stdint cimport uint64_t


cdef inline Py_ssize_t lower_bound(const uint64_t[::1] a, uint64_t v) noexcept nogil:
    """The first position of `a` whose value is not below v."""
    cdef Py_ssize_t lo = 0, hi = a.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t upper_bound(const uint64_t[::1] a, uint64_t v, Py_ssize_t lo
                                   ) noexcept nogil:
    """The first position of `a` from `lo` whose value is above v."""
    cdef Py_ssize_t hi = a.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo
