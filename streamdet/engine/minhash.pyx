# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The min-hash loop of SPEC §6 (engine.sketches), compiled.

hᵢ(d) = min over g of mix(g XOR Kᵢ) for the 84 seeds Kᵢ: one pass over a page's grams,
each gram mixed with every seed in registers. numpy needs eight passes of whole arrays
(XOR, three shifts and XORs, two products) over blocks of grams x 84 seeds, ~7x the time.
mix is splitmix64's finaliser (engine.grams.mix: the same constants).
"""

import numpy as np

from libc.stdint cimport uint64_t

cdef uint64_t MUL1 = 0xBF58476D1CE4E5B9ULL, MUL2 = 0x94D049BB133111EBULL


def min_mixed(grams, seeds):
    """The minimum over `grams` (uint64) of mix(g ^ seed), for each of `seeds` (uint64)."""
    cdef const uint64_t[::1] g = np.ascontiguousarray(grams, dtype=np.uint64)
    cdef const uint64_t[::1] s = np.ascontiguousarray(seeds, dtype=np.uint64)
    out_a = np.full(s.shape[0], 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)
    cdef uint64_t[::1] out = out_a
    cdef Py_ssize_t i, j
    cdef uint64_t h
    with nogil:
        for i in range(g.shape[0]):
            for j in range(s.shape[0]):
                h = g[i] ^ s[j]
                h ^= h >> 30
                h *= MUL1
                h ^= h >> 27
                h *= MUL2
                h ^= h >> 31
                if h < out[j]:
                    out[j] = h
    return out_a
