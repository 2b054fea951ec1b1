# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled loops of a document's (source, slot) pairs (engine.source_pairs): settling
a batch's changes into the sorted pairs, and reading stored slot lists (engine.paircodec).

Both run once per document a batch changes or reads, for every such document, so their
cost is mostly the calls' own: here each is one call, where numpy would take a dozen.
"""

import secrets

import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy

from streamdet.engine.bounds cimport lower_bound, upper_bound
from streamdet.engine.hash_tables cimport home, scramble, table_bits

# this process's secrets for the slot lists' hash table (engine.hash_tables)
cdef uint64_t _SEED = secrets.randbits(64)
cdef uint64_t _MIX = secrets.randbits(64) | 1


cdef struct Change:
    uint64_t src
    int32_t slot
    int32_t when
    uint8_t kept


cdef inline bint _before(const Change* x, const Change* y) noexcept nogil:
    """Whether x's (source, slot) comes before y's."""
    return x.src < y.src or (x.src == y.src and x.slot < y.slot)


cdef enum:
    RUN = 32  # changes insertion-sorted at a time before the merges


cdef void _sort_changes(Change* c, Change* tmp, Py_ssize_t n) noexcept nogil:
    """Sort changes by (source, slot), stably: they come in the order they were made, so
    a pair's changes stay in that order (its last decides it). A bottom-up merge sort
    with the comparison inlined: libc's qsort calls a function for each comparison,
    which costs more than the comparison."""
    cdef Py_ssize_t lo, hi, i, j, width, mid, end, a, b, k
    cdef Change x
    cdef Change* src = c
    cdef Change* dst = tmp
    cdef Change* swap
    lo = 0
    while lo < n:  # insertion sort of each run
        hi = lo + RUN if lo + RUN < n else n
        for i in range(lo + 1, hi):
            x = src[i]
            j = i
            while j > lo and _before(&x, &src[j - 1]):
                src[j] = src[j - 1]
                j -= 1
            src[j] = x
        lo = hi
    width = RUN
    while width < n:
        lo = 0
        while lo < n:
            mid = lo + width if lo + width < n else n
            end = lo + 2 * width if lo + 2 * width < n else n
            a, b, k = lo, mid, lo
            while a < mid and b < end:
                if _before(&src[b], &src[a]):  # ties: the earlier run's first (stable)
                    dst[k] = src[b]
                    b += 1
                else:
                    dst[k] = src[a]
                    a += 1
                k += 1
            while a < mid:
                dst[k] = src[a]
                a += 1
                k += 1
            while b < end:
                dst[k] = src[b]
                b += 1
                k += 1
            lo = end
        swap = src
        src = dst
        dst = swap
        width *= 2
    if src != c:
        memcpy(c, src, n * sizeof(Change))


def settle(const uint64_t[::1] src, const int32_t[::1] slot, list changes, list lost):
    """The pairs (src, slot), sorted by (source, slot), with `changes` applied: a list of
    (sources: an array or one docno, slots, kept: 1 added / 0 dropped), in order, and
    `lost`: (slots, number of changes before the loss). A pair's last change decides it;
    a pair made before its slot's last loss is gone. Returns the new (src, slot)."""
    cdef Py_ssize_t n_old = src.shape[0], n = 0, i, j, k, out = 0, high = 0
    cdef int32_t when = 0, x
    cdef uint8_t kept
    cdef uint64_t one
    cdef bint has_loss = len(lost) > 0
    cdef const int32_t[::1] cs
    cdef const uint64_t[::1] ss
    cdef int64_t[::1] loss
    cdef uint64_t[::1] src_out
    cdef int32_t[::1] slot_out
    cdef Change* c
    for item in changes:
        n += len(item[1])
    c = <Change*>malloc(2 * (n if n else 1) * sizeof(Change))  # and room to merge
    if c == NULL:
        raise MemoryError()
    try:
        k = 0
        for item in changes:
            cs = item[1]
            kept = item[2]
            if isinstance(item[0], np.ndarray):
                ss = item[0]
                for i in range(cs.shape[0]):
                    c[k].src = ss[i]
                    c[k].slot = cs[i]
                    c[k].when = when
                    c[k].kept = kept
                    k += 1
            else:
                one = item[0]
                for i in range(cs.shape[0]):
                    c[k].src = one
                    c[k].slot = cs[i]
                    c[k].when = when
                    c[k].kept = kept
                    k += 1
            when += 1
        _sort_changes(c, c + n, n)
        for i in range(n_old):
            if slot[i] >= high:
                high = slot[i] + 1
        for i in range(n):
            if c[i].slot >= high:
                high = c[i].slot + 1
        loss_a = np.full(high if has_loss else 1, -1, dtype=np.int64)
        loss = loss_a
        for slots, before in lost:
            cs = slots
            for i in range(cs.shape[0]):
                if cs[i] < high and loss[cs[i]] < before:
                    loss[cs[i]] = before
        src_a = np.empty(n_old + n, dtype=np.uint64)
        slot_a = np.empty(n_old + n, dtype=np.int32)
        src_out = src_a
        slot_out = slot_a
        i = j = 0
        with nogil:
            while i < n_old or j < n:
                # the next key: the smaller of the old pair's and the next change's
                if j >= n or (i < n_old and (src[i] < c[j].src or (
                        src[i] == c[j].src and slot[i] < c[j].slot))):
                    if not has_loss or loss[slot[i]] < 0:
                        src_out[out] = src[i]
                        slot_out[out] = slot[i]
                        out += 1
                    i += 1
                    continue
                if i < n_old and src[i] == c[j].src and slot[i] == c[j].slot:
                    i += 1  # an old pair its changes decide
                k = j
                while k + 1 < n and c[k + 1].src == c[j].src and c[k + 1].slot == c[j].slot:
                    k += 1
                x = c[k].slot
                if c[k].kept and (not has_loss or c[k].when >= loss[x]):
                    src_out[out] = c[k].src
                    slot_out[out] = x
                    out += 1
                j = k + 1
        return src_a[:out].copy(), slot_a[:out].copy()
    finally:
        free(c)


cdef object _starts(const uint8_t[::1] b, Py_ssize_t off, Py_ssize_t n_distinct):
    """Where each distinct list begins among the stored slots (and the total at the end)."""
    cdef Py_ssize_t i
    cdef uint32_t length
    starts = np.empty(n_distinct + 1, dtype=np.int64)
    cdef int64_t[::1] st = starts
    st[0] = 0
    for i in range(n_distinct):
        memcpy(&length, &b[off + 4 * i], 4)
        st[i + 1] = st[i] + length
    return starts


cdef inline Py_ssize_t _list_no(const uint8_t[::1] b, Py_ssize_t index_at, Py_ssize_t i,
                                int index_width) noexcept:
    cdef uint16_t v16
    cdef uint32_t v32
    if index_width == 2:
        memcpy(&v16, &b[index_at + 2 * i], 2)
        return v16
    memcpy(&v32, &b[index_at + 4 * i], 4)
    return v32


def decode_picked(const uint8_t[::1] b, Py_ssize_t off, Py_ssize_t n_sources,
                  const int64_t[::1] picks, const uint64_t[::1] picked,
                  Py_ssize_t n_distinct, int slot_width, int index_width):
    """(pair sources, pair slots, offset after the lists) of the sources at positions
    `picks` (ascending), named `picked`, among the `n_sources` whose slot lists are stored
    at `off` (layout in engine.paircodec: u32 lengths of the distinct lists, their slots
    (u16 or u32), then an index (u16 or u32) per source). Every source, or a few of a
    document whose other lists stay packed (a delta's): the cost is the picked pairs'."""
    cdef Py_ssize_t i, j, n = picks.shape[0], pairs = 0, at, start, lists_at, index_at
    cdef Py_ssize_t list_no
    cdef uint16_t v16
    cdef uint32_t v32
    cdef int64_t[::1] st = _starts(b, off, n_distinct)
    cdef int64_t[::1] ix
    cdef uint64_t[::1] src_out
    cdef int32_t[::1] slot_out
    lists_at = off + 4 * n_distinct
    index_at = lists_at + slot_width * st[n_distinct]
    index = np.empty(n, dtype=np.int64)
    ix = index
    for i in range(n):
        if picks[i] < 0 or picks[i] >= n_sources:
            raise IndexError("a picked source is not among the stored ones")
        ix[i] = _list_no(b, index_at, picks[i], index_width)
        pairs += st[ix[i] + 1] - st[ix[i]]
    src_a = np.empty(pairs, dtype=np.uint64)
    slot_a = np.empty(pairs, dtype=np.int32)
    src_out = src_a
    slot_out = slot_a
    at = 0
    for i in range(n):
        list_no = ix[i]
        start = lists_at + slot_width * st[list_no]
        for j in range(st[list_no + 1] - st[list_no]):
            src_out[at] = picked[i]
            if slot_width == 2:
                memcpy(&v16, &b[start + 2 * j], 2)
                slot_out[at] = v16
            else:
                memcpy(&v32, &b[start + 4 * j], 4)
                slot_out[at] = <int32_t>v32
            at += 1
    return src_a, slot_a, index_at + index_width * n_sources


def count_pairs(const uint8_t[::1] b, Py_ssize_t off, Py_ssize_t n_sources,
                Py_ssize_t n_distinct, int slot_width, int index_width):
    """How many pairs the lists stored at `off` hold, from their header and index alone."""
    cdef Py_ssize_t i, list_no, pairs = 0
    cdef int64_t[::1] st = _starts(b, off, n_distinct)
    cdef Py_ssize_t index_at = off + 4 * n_distinct + slot_width * st[n_distinct]
    for i in range(n_sources):
        list_no = _list_no(b, index_at, i, index_width)
        pairs += st[list_no + 1] - st[list_no]
    return pairs


def merge_pairs(const uint64_t[::1] sa, const int32_t[::1] ta, const uint64_t[::1] sb,
                const int32_t[::1] tb):
    """Two lists of pairs, each sorted by (source, slot), as one sorted list: a delta's
    lists put back among the snapshot's (their sources are the snapshot's minus theirs,
    so no pair is in both). One linear pass, where `settle` sorts its changes first."""
    cdef Py_ssize_t na = sa.shape[0], nb = sb.shape[0], i = 0, j = 0, k = 0
    src_a = np.empty(na + nb, dtype=np.uint64)
    slot_a = np.empty(na + nb, dtype=np.int32)
    cdef uint64_t[::1] so = src_a
    cdef int32_t[::1] to = slot_a
    with nogil:
        while i < na and j < nb:
            if sa[i] < sb[j] or (sa[i] == sb[j] and ta[i] <= tb[j]):
                so[k] = sa[i]
                to[k] = ta[i]
                i += 1
            else:
                so[k] = sb[j]
                to[k] = tb[j]
                j += 1
            k += 1
        while i < na:
            so[k] = sa[i]
            to[k] = ta[i]
            i += 1
            k += 1
        while j < nb:
            so[k] = sb[j]
            to[k] = tb[j]
            j += 1
            k += 1
    return src_a, slot_a


def decode_adds(const uint8_t[::1] raw):
    """Pending additions' (source, gram) pairs, one source a gram, from their records as
    engine.documents keeps them (a source u64, a count u32, that many grams u64, little
    endian like the other kernels' input): one call for a document's additions, which
    settle whenever a stale document is next changed otherwise."""
    cdef Py_ssize_t end = raw.shape[0], off = 0, total = 0, k = 0, i
    cdef uint32_t n
    cdef uint64_t source
    while off < end:
        if off + 12 > end:
            raise ValueError("a pending addition's record is cut short")
        memcpy(&n, &raw[off + 8], 4)
        total += n
        off += 12 + 8 * <Py_ssize_t>n
    if off != end:
        raise ValueError("a pending addition's record is cut short")
    src_a = np.empty(total, dtype=np.uint64)
    grams_a = np.empty(total, dtype=np.uint64)
    cdef uint64_t[::1] src_out = src_a
    cdef uint64_t[::1] grams_out = grams_a
    off = 0
    while off < end:
        memcpy(&source, &raw[off], 8)
        memcpy(&n, &raw[off + 8], 4)
        for i in range(n):
            src_out[k + i] = source
        if n:
            memcpy(&grams_out[k], &raw[off + 12], 8 * <Py_ssize_t>n)
        k += n
        off += 12 + 8 * <Py_ssize_t>n
    return src_a, grams_a


cdef inline uint64_t _list_hash(const int32_t* s, Py_ssize_t n) noexcept nogil:
    """A hash of a slot list keyed by this process's secret (each slot scrambled into the
    state in turn): a hostile page chooses which of its grams its sources share, so it
    must not be able to choose lists that collide (engine.hash_tables)."""
    cdef uint64_t h = _SEED ^ <uint64_t>n
    cdef Py_ssize_t i
    for i in range(n):
        h = scramble(h ^ <uint32_t>s[i])
    return h


def distinct_lists(const uint64_t[::1] src, const int32_t[::1] slot,
                   const uint64_t[::1] keys):
    """Each source of `keys` with its slot list from the pairs (src, slot), sorted by
    (source, slot), numbered by distinct list in order of first appearance (the layout of
    engine.paircodec). Returns (each source's list number, each distinct list's length,
    the distinct lists' slots one after the other): the lists are found equal through a
    hash table over their slots, so a document's encoding is linear in its pairs."""
    cdef Py_ssize_t n = keys.shape[0], i, e, mask, n_distinct = 0, lo, hi, total = 0
    cdef int bits = table_bits(n, 4)
    cdef Py_ssize_t size = <Py_ssize_t>1 << bits
    cdef uint64_t h
    cdef int32_t* mine
    mask = size - 1
    table_a = np.full(size, -1, dtype=np.int64)
    ids_a = np.empty(n, dtype=np.int64)
    starts_a = np.empty(n, dtype=np.int64)
    lengths_a = np.empty(n, dtype=np.int64)
    hashes_a = np.empty(n, dtype=np.uint64)
    cdef int64_t[::1] table = table_a
    cdef int64_t[::1] ids = ids_a
    cdef int64_t[::1] starts = starts_a
    cdef int64_t[::1] lengths = lengths_a
    cdef uint64_t[::1] hashes = hashes_a
    with nogil:
        for i in range(n):
            lo = lower_bound(src, keys[i])
            hi = upper_bound(src, keys[i], lo)
            mine = <int32_t*>&slot[lo] if hi > lo else NULL
            h = _list_hash(mine, hi - lo)
            e = home(h, _MIX, 64 - bits)
            while True:
                if table[e] < 0:  # a list not seen before
                    table[e] = n_distinct
                    starts[n_distinct] = lo
                    lengths[n_distinct] = hi - lo
                    hashes[n_distinct] = h
                    ids[i] = n_distinct
                    n_distinct += 1
                    break
                if (hashes[table[e]] == h and lengths[table[e]] == hi - lo and (
                        hi == lo or memcmp(&slot[starts[table[e]]], mine,
                                           (hi - lo) * sizeof(int32_t)) == 0)):
                    ids[i] = table[e]
                    break
                e = (e + 1) & mask
        for i in range(n_distinct):
            total += lengths[i]
    lists_a = np.empty(total, dtype=np.int32)
    cdef int32_t[::1] lists = lists_a
    with nogil:
        total = 0
        for i in range(n_distinct):
            if lengths[i]:
                memcpy(&lists[total], &slot[starts[i]], lengths[i] * sizeof(int32_t))
            total += lengths[i]
    return ids_a, lengths_a[:n_distinct].copy(), lists_a

