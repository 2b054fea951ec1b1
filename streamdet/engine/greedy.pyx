# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The greedy source cover of one document (SPEC §1 "cover"), compiled: engine.cover is
its Python face.

The input is the document's (source, slot) pairs (engine.source_pairs): source i holds
patch-gram slot x. Each source's gain (its slots still uncovered) is kept exact: when a
step covers slot x, each of x's holders (at most m - 1) loses one. A max-heap ordered by
the SPEC's key (most gain, then most slots held overall, then the smallest URL: the
lowest rank) is checked lazily: an entry whose gain is stale goes back with its exact
gain, so the top entry with an exact gain is the greedy's choice, ties included. Every
pair is covered once and every holder decremented once per pair, and each stale pop
follows a decrement: O((pairs + sources) log sources) for any document (SPEC §9).
"""

import numpy as np

from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc

from streamdet.engine.bounds cimport lower_bound, upper_bound


cdef inline bint _before(int64_t ga, int64_t ta, int64_t ra,
                         int64_t gb, int64_t tb, int64_t rb) noexcept nogil:
    """Whether key a = (gain, total, rank) is chosen before key b."""
    if ga != gb:
        return ga > gb
    if ta != tb:
        return ta > tb
    return ra < rb


cdef void _sift_down(int64_t[::1] hg, int32_t[::1] hs, const int64_t[::1] total,
                     const int64_t[::1] rank, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    cdef Py_ssize_t child, best
    cdef int64_t g = hg[i]
    cdef int32_t s = hs[i]
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        best = child
        if child + 1 < n and _before(hg[child + 1], total[hs[child + 1]], rank[hs[child + 1]],
                                     hg[child], total[hs[child]], rank[hs[child]]):
            best = child + 1
        if not _before(hg[best], total[hs[best]], rank[hs[best]], g, total[s], rank[s]):
            break
        hg[i] = hg[best]
        hs[i] = hs[best]
        i = best
    hg[i] = g
    hs[i] = s


def cover_steps(const int32_t[::1] pair_src, const int32_t[::1] pair_slot, int n_src,
                int n_slots, const int64_t[::1] rank, const int32_t[::1] prefix,
                bint resume):
    """The greedy's picks: the sources of `prefix` first, in order (steps known to be the
    greedy's own), then, when `resume`, the greedy's own until nothing more is covered.
    Pairs index sources 0 .. n_src - 1 and slots 0 .. n_slots - 1; `rank` orders the
    sources by URL. Returns (picked sources, their gains, the step that covered each slot
    or -1, the work done: heap pops, slots visited and gains lowered, at most
    sources + 3 pairs)."""
    cdef Py_ssize_t n_pairs = pair_src.shape[0], i, k, n_picks = 0
    cdef int64_t work = 0
    cdef int32_t s, x
    cdef int64_t g
    total_a = np.zeros(n_src, dtype=np.int64)
    by_src_ptr_a = np.zeros(n_src + 1, dtype=np.int64)
    by_slot_ptr_a = np.zeros(n_slots + 1, dtype=np.int64)
    cdef int64_t[::1] total = total_a
    cdef int64_t[::1] src_ptr = by_src_ptr_a
    cdef int64_t[::1] slot_ptr = by_slot_ptr_a
    for i in range(n_pairs):
        total[pair_src[i]] += 1
        slot_ptr[pair_slot[i] + 1] += 1
    for i in range(n_src):
        src_ptr[i + 1] = src_ptr[i] + total[i]
    for i in range(n_slots):
        slot_ptr[i + 1] += slot_ptr[i]
    src_slots_a = np.empty(n_pairs, dtype=np.int32)
    slot_srcs_a = np.empty(n_pairs, dtype=np.int32)
    cdef int32_t[::1] src_slots = src_slots_a
    cdef int32_t[::1] slot_srcs = slot_srcs_a
    fill_a = np.zeros(n_src, dtype=np.int64)
    fill_x_a = np.zeros(n_slots, dtype=np.int64)
    cdef int64_t[::1] fill = fill_a
    cdef int64_t[::1] fill_x = fill_x_a
    for i in range(n_pairs):
        s = pair_src[i]
        x = pair_slot[i]
        src_slots[src_ptr[s] + fill[s]] = x
        fill[s] += 1
        slot_srcs[slot_ptr[x] + fill_x[x]] = s
        fill_x[x] += 1

    gain_a = total_a.copy()
    step_a = np.full(n_slots, -1, dtype=np.int32)
    picks_a = np.empty(n_src, dtype=np.int32)
    gains_a = np.empty(n_src, dtype=np.int64)
    cdef int64_t[::1] gain = gain_a
    cdef int32_t[::1] step_of = step_a
    cdef int32_t[::1] picks = picks_a
    cdef int64_t[::1] gains = gains_a

    for k in range(prefix.shape[0]):
        s = prefix[k]
        g = _take(s, <int32_t>n_picks, src_ptr, src_slots, slot_ptr, slot_srcs, gain, step_of,
                  &work)
        picks[n_picks] = s
        gains[n_picks] = g
        n_picks += 1
    if resume:
        hg_a = np.empty(n_src, dtype=np.int64)
        hs_a = np.empty(n_src, dtype=np.int32)
        n_picks = _resume(n_src, total, rank, src_ptr, src_slots, slot_ptr, slot_srcs, gain,
                          step_of, picks, gains, n_picks, hg_a, hs_a, &work)
    return picks_a[:n_picks].copy(), gains_a[:n_picks].copy(), step_a, work


cdef Py_ssize_t _resume(int n_src, const int64_t[::1] total, const int64_t[::1] rank,
                        const int64_t[::1] src_ptr, const int32_t[::1] src_slots,
                        const int64_t[::1] slot_ptr, const int32_t[::1] slot_srcs,
                        int64_t[::1] gain, int32_t[::1] step_of, int32_t[::1] picks,
                        int64_t[::1] gains, Py_ssize_t n_picks, int64_t[::1] hg,
                        int32_t[::1] hs, int64_t* work) noexcept nogil:
    """The lazy greedy from the gains left by the steps taken; returns the picks' count."""
    cdef Py_ssize_t n_heap = 0, i
    cdef int32_t s
    cdef int64_t g
    for i in range(n_src):
        if gain[i] > 0:
            hg[n_heap] = gain[i]
            hs[n_heap] = <int32_t>i
            n_heap += 1
    i = n_heap // 2
    while i > 0:
        i -= 1
        _sift_down(hg, hs, total, rank, n_heap, i)
    while n_heap > 0:
        work[0] += 1
        s = hs[0]
        if hg[0] != gain[s]:  # stale: back with its exact gain (or out, at none)
            if gain[s] > 0:
                hg[0] = gain[s]
            else:
                n_heap -= 1
                hg[0] = hg[n_heap]
                hs[0] = hs[n_heap]
            _sift_down(hg, hs, total, rank, n_heap, 0)
            continue
        n_heap -= 1
        hg[0] = hg[n_heap]
        hs[0] = hs[n_heap]
        _sift_down(hg, hs, total, rank, n_heap, 0)
        g = _take(s, <int32_t>n_picks, src_ptr, src_slots, slot_ptr, slot_srcs, gain, step_of,
                  work)
        picks[n_picks] = s
        gains[n_picks] = g
        n_picks += 1
    return n_picks


cdef int64_t _take(int32_t s, int32_t step, const int64_t[::1] src_ptr,
                   const int32_t[::1] src_slots, const int64_t[::1] slot_ptr,
                   const int32_t[::1] slot_srcs, int64_t[::1] gain,
                   int32_t[::1] step_of, int64_t* work) noexcept nogil:
    """Source s covers its uncovered slots at `step`; each of their holders loses one.
    Returns how many it newly covered."""
    cdef int64_t newly = 0, j, k
    cdef int32_t x
    work[0] += src_ptr[s + 1] - src_ptr[s]
    for j in range(src_ptr[s], src_ptr[s + 1]):
        x = src_slots[j]
        if step_of[x] >= 0:
            continue
        step_of[x] = step
        newly += 1
        work[0] += slot_ptr[x + 1] - slot_ptr[x]
        for k in range(slot_ptr[x], slot_ptr[x + 1]):
            gain[slot_srcs[k]] -= 1
    return newly


def first_change_at(const uint64_t[::1] src, const int32_t[::1] slot, Py_ssize_t n_slots,
                    const uint64_t[::1] cover, const int64_t[::1] gains,
                    const int64_t[::1] cover_rank, const uint64_t[::1] new,
                    const int64_t[::1] new_rank):
    """engine.cover.first_change in one call: -1 when the cover (sources `cover`, their
    gains) still stands after the sources `new` were added, else how many of its steps
    stand. Pairs (src, slot) are sorted by source; ranks order the URLs (equal URLs,
    equal ranks). The cover is replayed once (the step covering each slot; a gain that
    differs from the replay's: 0), then each new source's slots are counted by the step
    that covers them, which gives its gain at every step: O(pairs + new x steps)."""
    cdef Py_ssize_t c = cover.shape[0], i, j, k, lo, hi, n, first = c
    cdef int64_t newly, before, gain
    cdef int32_t st
    cdef bint after = False, wins
    cdef int32_t* step_of = <int32_t*>malloc((n_slots if n_slots else 1) * sizeof(int32_t))
    cdef int64_t* totals = <int64_t*>malloc((c if c else 1) * sizeof(int64_t))
    cdef int64_t* hist = <int64_t*>calloc(c + 1, sizeof(int64_t))
    if step_of == NULL or totals == NULL or hist == NULL:
        free(step_of)
        free(totals)
        free(hist)
        raise MemoryError()
    with nogil:
        for i in range(n_slots):
            step_of[i] = -1
        for k in range(c):  # replay the cover's steps
            lo = lower_bound(src, cover[k])
            hi = upper_bound(src, cover[k], lo)
            totals[k] = hi - lo
            newly = 0
            for i in range(lo, hi):
                if step_of[slot[i]] < 0:
                    step_of[slot[i]] = <int32_t>k
                    newly += 1
            if newly != gains[k]:  # not the situation the check is for
                first = -2
                break
        if first != -2:
            for i in range(new.shape[0]):
                lo = lower_bound(src, new[i])
                hi = upper_bound(src, new[i], lo)
                n = hi - lo
                if not n:
                    continue
                for j in range(c + 1):
                    hist[j] = 0
                for k in range(lo, hi):
                    st = step_of[slot[k]]
                    hist[st if st >= 0 else c] += 1
                if hist[c]:
                    after = True  # it still covers something after the last step
                before = 0  # its slots covered before step j
                for j in range(first):
                    gain = n - before
                    wins = gain > gains[j] or (gain == gains[j] and gain > 0 and (
                        n > totals[j] or (n == totals[j] and new_rank[i] < cover_rank[j])))
                    if wins:
                        first = j
                        break
                    before += hist[j]
    free(step_of)
    free(totals)
    free(hist)
    if first == -2:
        return 0
    if first < c:
        return first
    return c if after else -1
