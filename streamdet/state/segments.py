"""Immutable sorted segments of first-holder pairs: the bulk of the gram index.

Most grams are seen once. Writing one RocksDB key per gram costs ~3 us of CPU per gram
here (memtable insert, flush, compaction), more than parsing the page. So the first holder
of every new gram is written as a (gram, docno) pair into the batch's *segment*: the pairs
sorted by gram, cut into chunks of CHUNK pairs, each chunk one RocksDB value, plus the
chunk fences and a Bloom filter (state.bloom). Anything that later changes a gram's posting
(a second holder, the common marker, a withdrawal) is written to the `grams` overlay, which
always wins over segments.

A segment of MAPPED_PAIRS or more keeps its pairs, filter and fences in a file of its own
(state.segment_files), mapped while a lookup reads it; the KV holds none of its keys.
Smaller ones (a Kafka worker's rounds) are chunks in the KV, with their fences and filter.

Lookups test each segment's Bloom filter (vectorised over the whole batch), read only the
chunks that may hold a candidate, and binary-search them (a mapped segment's in place, a
window of its pairs at a time, each window's candidates in one vectorised search). A chunk
packs each pair as its gram (8 bytes) and its docno less the segment's lowest, in as few
bytes as the segment's docno range needs (usually 3): 11 bytes a pair instead of 16, which
keeps a 500,000-page state inside this machine's page cache for longer (reads of the state
that miss it cost ~7 ms a page, measured with the cache dropped before every batch).
Decoded chunks are not cached: the grams looked up in segments are ones seen once before,
spread evenly over all chunks, so a cache of any reasonable size would hardly ever hit.
Segments of similar size are merged (tiered compaction) so that their number stays
logarithmic; merging drops pairs of withdrawn versions. A merge is written under a new
segment id first and switched in by one atomic write of the manifest, so a crash mid-merge
leaves an orphan that is deleted on open.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..engine.keyed import u64keys
from ..engine.sorting import sorted_unique
from .bloom import BlockedBloom, Filter, Probe, SplitBlockBloom
from .kv import KV, DeleteRange, Op
from .segment_files import (
    PAD,
    WINDOW_BYTES,
    FileWriter,
    MappedParts,
    SegmentFileLost,
    SegmentFiles,
)

# Pairs per chunk value (1 KB). A lookup reads a whole chunk to find one pair, and most
# lookups (grams seen once before) fall on distinct chunks, so the bytes read and decoded
# per lookup are the chunk size: small chunks keep lookups cheap, for a few more keys
# (~0.1 byte per pair on disk).
CHUNK = 64
MERGE_FANIN = 4  # merge when this many segments share a size tier
TIER_BASE = 4  # size tiers are powers of this
TIER_FLOOR = 2048  # pairs; smaller segments are all tier 0
MAX_MERGED = 1 << 25  # pairs; bigger segments are not merged again (bounds rewrites)
MERGE_SLICE = 1 << 18  # pairs a merge decodes and sorts at a time (~20 MB of arrays)
# Merged-away segments with chunks in the KV at least this big are compacted away at once
# (see merge); a mapped segment's file is simply removed. Smaller ones are left to
# RocksDB: a forced compaction of a range flushes the memtables first, and a stream of
# small rounds (a Kafka worker's) merges tiny segments every few rounds, where those
# flushes cost more CPU than the engine's work (8.4 of 52 CPU s at 4 pages a round);
# their pairs are mostly still in the memtable, where the range deletion drops them at
# flush anyway.
RECLAIM_PAIRS = 1 << 20
# Segments of at least this many pairs of a state written before segment files held pairs
# were ingested into RocksDB as SST files, which a range deletion reaches only by a
# compaction of its range: a merge compacts away every input with chunks in the KV that
# may have been ingested (INGESTED_PAIRS // 4 and more: a merge's output was ingested by
# the pairs of its inputs, and may have lost up to 3/4 of them to withdrawn versions).
INGESTED_PAIRS = 1 << 18
# Segments of at least this many pairs live in a file of their own (state.segment_files),
# mapped only while a lookup reads it; smaller ones (a Kafka worker's small tiers: a few
# MB together) keep their chunks, filter and fences in the KV, the last two in memory too.
MAPPED_PAIRS = 1 << 16

_KEY = struct.Struct(">IcI")
# key kinds of a segment's filter (the other kinds: b"c" chunks, b"f" fences)
SPLIT_FILTER = b"s"  # bloom.SplitBlockBloom, written since state format 6
WORD_FILTER = b"b"  # bloom.BlockedBloom, formats up to 5 (read, never written)


def seg_key(seg_id: int, kind: bytes, index: int) -> bytes:
    return _KEY.pack(seg_id, kind, index)


@dataclass(frozen=True)
class Packing:
    """How a segment's chunks hold their pairs: pair after pair, each the gram (u64 LE)
    then docno - lo in `docno_bytes` bytes (LE), lo..hi bounding the segment's docnos.
    `LEGACY` is the layout of state format 4 and before, still read: a chunk's grams,
    then its docnos, u64 each."""

    lo: int
    hi: int
    legacy: bool = False

    @classmethod
    def of(cls, docnos: np.ndarray) -> Packing:
        return cls(int(docnos.min()), int(docnos.max())) if len(docnos) else cls(0, 0)

    @classmethod
    def spanning(cls, packings: list[Packing]) -> Packing:
        """A packing for the merge of segments packed so (legacy ones: any docno)."""
        if any(p.legacy for p in packings):
            return cls(0, (1 << 64) - 1)
        return cls(min(p.lo for p in packings), max(p.hi for p in packings))

    @property
    def docno_bytes(self) -> int:
        return 8 if self.legacy else max(1, -(-(self.hi - self.lo).bit_length() // 8))

    @property
    def pair_bytes(self) -> int:
        return 8 + self.docno_bytes

    def manifest_entry(self, seg_id: int, n: int) -> list[int]:
        return [seg_id, n] if self.legacy else [seg_id, n, self.lo, self.hi]

    @classmethod
    def from_manifest(cls, entry: list[int]) -> Packing:
        return LEGACY if len(entry) == 2 else cls(entry[2], entry[3])

    def encode(self, grams: np.ndarray, docnos: np.ndarray) -> bytes:
        """Pairs side by side (not for the legacy layout, which is only read)."""
        n, w = len(grams), self.pair_bytes
        rows = np.empty((n, w), dtype=np.uint8)
        rows[:, :8] = grams.astype("<u8").view(np.uint8).reshape(n, 8)
        rel = (docnos - np.uint64(self.lo)).astype("<u8").view(np.uint8).reshape(n, 8)
        rows[:, 8:] = rel[:, : self.docno_bytes]
        return rows.tobytes()

    def decode(self, raws: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """The pairs of some chunks, concatenated in order."""
        if self.legacy:
            return _decode_legacy(raws)
        buf = b"".join(raws)
        grams, rel = self.columns(np.frombuffer(buf + bytes(8), dtype=np.uint8),
                                  len(buf) // self.pair_bytes)
        return grams.astype(np.uint64), self.docnos(rel)

    def columns(self, padded: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Views of `n` packed pairs (bytes, 8 more after the last): the grams, and each
        docno - lo in the low `docno_bytes` bytes of a u64 (`docnos` masks it): an
        unaligned u64 read at every pair's start, and 8 bytes on. Nothing is copied."""
        w = self.pair_bytes
        grams = np.ndarray((n,), dtype="<u8", buffer=padded, strides=(w,))
        rel = np.ndarray((n,), dtype="<u8", buffer=padded, offset=8, strides=(w,))
        return grams, rel

    def docnos(self, rel: np.ndarray) -> np.ndarray:
        """Docnos from `columns`' second view (or values taken from it)."""
        return (rel & np.uint64((1 << (8 * self.docno_bytes)) - 1)) + np.uint64(self.lo)


LEGACY = Packing(0, (1 << 64) - 1, legacy=True)


@dataclass
class Segment:
    id: int
    n: int
    fences: np.ndarray  # first gram of every chunk
    bloom: Filter
    packing: Packing
    parts: MappedParts | None = None  # the file mapped, when fences and bloom live there
    in_file: bool = False  # its pairs live in the file too (none in the KV)

    def manifest_entry(self) -> list[int]:
        """Its entry in the manifest: id, pairs, the packing's range, and 1 when its pairs
        are in its file (a state written before such files has no fifth field)."""
        entry = self.packing.manifest_entry(self.id, self.n)
        return [*entry, 1] if self.in_file else entry

    def pair_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Views of the pairs in the mapped file (Packing.columns)."""
        return self.packing.columns(self.parts.pair_data, self.n)

    def release_pairs(self, lo: int, hi: int) -> None:
        """Drop the mapped pages of pairs [lo, hi) (and the padding's, at the end)."""
        w = self.packing.pair_bytes
        self.parts.release(self.parts.pairs_at + lo * w, (min(hi, self.n) - lo) * w + PAD)

    def may_contain(self, probe: Probe) -> np.ndarray:
        """The filter's answer; a mapped filter is read a window at a time and each
        window's pages are dropped from the process after it."""
        if self.parts is None or not isinstance(self.bloom, SplitBlockBloom):
            return self.bloom.may_contain(probe)
        return _windowed(self.bloom, self.parts, probe)

    def release(self) -> None:
        """Drop the pages of a mapped segment that a lookup touched (fences included)."""
        if self.parts is not None:
            self.parts.release()

    @property
    def tier(self) -> int:
        t, size = 0, self.n
        while size >= TIER_FLOOR:
            size //= TIER_BASE
            t += 1
        return t


@dataclass
class Admitted:
    """The segments' filters' answers for one probe: per probe gram whether any segment
    may hold it, and per segment the grams its filter admits (in probe order). Kept so
    that the chunk reads for a batch's grams need not probe the filters a second time."""

    any: np.ndarray
    per_segment: list[tuple[Segment, np.ndarray]]


def _sorting(positions: np.ndarray) -> np.ndarray | None:
    """A stable order that sorts `positions`, or None when they are sorted already."""
    if len(positions) > 1 and bool((positions[1:] < positions[:-1]).any()):
        return np.argsort(positions, kind="stable")
    return None


def _windows(positions: np.ndarray, per_window: int, end: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) of each non-empty run of the sorted `positions` (below `end`) that falls
    in one window of `per_window` positions: a lookup reads a mapped part a window at a
    time, dropping each window's pages after it."""
    cuts = np.searchsorted(positions, np.arange(per_window, end, per_window)).tolist()
    for lo, hi in zip([0, *cuts], [*cuts, len(positions)], strict=True):
        if hi > lo:
            yield lo, hi


def _windowed(bloom: SplitBlockBloom, parts: MappedParts, probe: Probe) -> np.ndarray:
    """may_contain over a mapped filter, WINDOW_BYTES of it at a time in word order."""
    first, grams = bloom.first_words(probe), probe.grams
    order = _sorting(first)
    if order is not None:
        first, grams = first[order], grams[order]
    out = np.zeros(len(first), dtype=bool)
    for lo, hi in _windows(first, WINDOW_BYTES // 8, len(bloom.words)):
        out[lo:hi] = bloom.test(grams[lo:hi])
        start = parts.words_at + int(first[lo]) * 8
        parts.release(start, parts.words_at + int(first[hi - 1]) * 8 + 32 - start)
    if order is None:
        return out
    unsorted = np.empty_like(out)
    unsorted[order] = out
    return unsorted


def _mapped(files: SegmentFiles, seg_id: int, n: int, packing: Packing) -> Segment:
    """The handle of a segment whose file was just written (finished, synced)."""
    parts = files.open(seg_id)
    if parts is None:
        raise OSError(f"segment file {files.path(seg_id)} unreadable after writing")
    return _mapped_parts(seg_id, n, packing, parts)


def _mapped_parts(seg_id: int, n: int, packing: Packing, parts: MappedParts) -> Segment:
    return Segment(seg_id, n, parts.fences, SplitBlockBloom(parts.words), packing, parts,
                   in_file=parts.pair_data is not None)


def _find_in_file(s: Segment, cand: np.ndarray, chunk_of: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grams, first holders) of the candidates a mapped segment holds, and the chunks
    they were found in; `chunk_of`: the candidates' chunks by the fences. A binary search
    within each candidate's chunk, all of a window's candidates at once, over the mapped
    pairs: one step a halving, each reading about one page of the file a candidate, and
    no pair is copied but those compared. The candidates go in chunk order, WINDOW_BYTES
    of pairs at a time, and each window's pages are dropped from the process after it: a
    batch's candidates fall on most pages of a big segment, which would otherwise all be
    resident at once."""
    order = _sorting(chunk_of)
    if order is not None:
        cand, chunk_of = cand[order], chunk_of[order]
    per_window = max(1, WINDOW_BYTES // (CHUNK * s.packing.pair_bytes))
    found, holders, chunks = [], [], []
    for lo, hi in _windows(chunk_of, per_window, int(chunk_of[-1]) + 1):
        g, d, c = _search_chunks(s, cand[lo:hi], chunk_of[lo:hi])
        found.append(g)
        holders.append(d)
        chunks.append(c)
        s.release_pairs(int(chunk_of[lo]) * CHUNK, (int(chunk_of[hi - 1]) + 1) * CHUNK)
    return np.concatenate(found), np.concatenate(holders), np.concatenate(chunks)


def _search_chunks(s: Segment, cand: np.ndarray, chunk_of: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_find_in_file` for one window: binary lifting from each chunk's first pair."""
    grams, rel = s.pair_columns()
    last = s.n - 1
    pos = chunk_of.astype(np.int64) * CHUNK  # every pair before pos is below its candidate
    step = CHUNK // 2
    while step:
        below = grams[np.minimum(pos + (step - 1), last)] < cand
        pos += below * step
        step //= 2
    pos = np.minimum(pos, last)
    hit = grams[pos] == cand
    return cand[hit], s.packing.docnos(rel[pos[hit]]), chunk_of[hit]


def _add_chunks(raws: list[bytes], packing: Packing, bloom: SplitBlockBloom,
                file: FileWriter | None) -> np.ndarray:
    """Some chunks' grams into a filter being rebuilt; their fences (each chunk's first
    gram), also written to the file when there is one."""
    g, _d = packing.decode(raws)
    sizes = np.fromiter((len(r) // packing.pair_bytes for r in raws), dtype=np.intp)
    first = g[np.cumsum(sizes) - sizes]
    bloom.add_sorted(g)
    if file is not None:
        file.add_fences(first)
    return first


def segment_ops(seg_id: int, grams: np.ndarray, docnos: np.ndarray,
                files: SegmentFiles | None = None) -> tuple[list[Op], Segment]:
    """Ops writing a segment (grams sorted and distinct) and its handle; with `files`, a
    segment of MAPPED_PAIRS or more is written to its file (no ops but the manifest's)."""
    writer = SegmentWriter(seg_id, len(grams), Packing.of(docnos), files)
    ops = writer.add(grams, docnos)
    rest, seg = writer.finish()
    return ops + rest, seg


class SegmentWriter:
    """Writes a segment from pairs given in ascending gram order, a slice at a time, so
    that a merge holds one slice (plus the fences and the Bloom filter, ~3 bytes a pair)
    rather than every pair of its inputs: merging four segments of 30 M pairs at once
    took ~9 GB at 500,000 documents."""

    def __init__(self, seg_id: int, capacity: int, packing: Packing,
                 files: SegmentFiles | None = None) -> None:
        self.id, self.n, self.packing = seg_id, 0, packing
        self.capacity = capacity  # an upper bound on the pairs
        self.files = files if files is not None and capacity >= MAPPED_PAIRS else None
        self._file: FileWriter | None = None
        if self.files is not None:
            self._file = self.files.writer(seg_id, SplitBlockBloom.words_for(capacity),
                                           fence_room=-(-capacity // CHUNK),
                                           pair_bytes=packing.pair_bytes)
            self.bloom = SplitBlockBloom(self._file.words)
        else:
            self.bloom = SplitBlockBloom.sized(capacity)
        self._fences: list[np.ndarray] = []
        self._chunks = 0
        self._rest = (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64))

    def add(self, grams: np.ndarray, docnos: np.ndarray) -> list[Op]:
        """Ops for the full chunks these pairs complete (a short rest waits for more)."""
        g = np.concatenate((self._rest[0], grams))
        d = np.concatenate((self._rest[1], docnos))
        full = len(g) // CHUNK * CHUNK
        self._rest = (g[full:], d[full:])
        return self._chunk_ops(g[:full], d[:full])

    def finish(self) -> tuple[list[Op], Segment]:
        """Ops for the last chunk, the fences and the filter (or the file, written and
        synced now: before the manifest that makes the segment live); its handle."""
        ops = self._chunk_ops(*self._rest)
        if self._file is not None:
            del self.bloom  # a view of the mapping being closed
            self._file.finish(self.n)
            return ops, _mapped(self.files, self.id, self.n, self.packing)
        fences = np.concatenate(self._fences) if self._fences else np.zeros(0, dtype=np.uint64)
        ops.append(("segs", seg_key(self.id, b"f", 0), fences.astype("<u8").tobytes()))
        ops.append(("segs", seg_key(self.id, SPLIT_FILTER, 0), self.bloom.to_bytes()))
        return ops, Segment(self.id, self.n, fences, self.bloom, self.packing)

    def _chunk_ops(self, g: np.ndarray, d: np.ndarray) -> list[Op]:
        if not len(g):
            return []
        self.bloom.add_sorted(g)
        self.n += len(g)
        if self._file is not None:
            self._file.add_fences(g[::CHUNK])
            self._file.release_below(int(self.bloom.first_words(Probe(g[-1:]))[0]))
            self._file.add_pairs(self.packing.encode(g, d))
            return []
        self._fences.append(g[::CHUNK].copy())
        ops = [("segs", seg_key(self.id, b"c", self._chunks + i), value)
               for i, value in enumerate(self._chunk_values(g, d))]
        self._chunks += len(ops)
        return ops


    def abandon(self) -> None:
        """Drop an unfinished file (a failed write)."""
        if self._file is not None:
            self._file.abandon()

    def _chunk_values(self, grams: np.ndarray, docnos: np.ndarray) -> list[bytes]:
        """Chunk values of CHUNK pairs (the last may be short), encoded in one piece."""
        blob = self.packing.encode(grams, docnos)
        size = CHUNK * self.packing.pair_bytes
        return [blob[i : i + size] for i in range(0, len(blob), size)]


def _key_range(seg_id: int) -> tuple[bytes, bytes]:
    """[start, end) of a segment's keys."""
    return seg_key(seg_id, b"\x00", 0), seg_key(seg_id + 1, b"\x00", 0)


def _drop_op(seg_id: int) -> Op:
    """Delete every key of a segment."""
    start, end = _key_range(seg_id)
    return ("segs", start, DeleteRange(end))


def _decode_legacy(raws: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Legacy chunks (grams, then docnos) concatenated in order: one gather."""
    if not raws:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    arr = np.frombuffer(b"".join(raws), dtype="<u8")
    lens = np.fromiter(map(len, raws), dtype=np.intp, count=len(raws)) // 16
    before = np.cumsum(lens) - lens  # pairs in the chunks before each one
    # pair e of chunk j sits at u64 index 2*before[j] + (e - before[j]) = e + before[j],
    # and its docno lens[j] further on
    at = np.arange(len(arr) // 2) + np.repeat(before, lens)
    return arr[at].astype(np.uint64), arr[at + np.repeat(lens, lens)].astype(np.uint64)


@dataclass
class LookupCounts:
    """What lookups cost so far (for benchmarks and tuning): grams looked up, grams found,
    chunks read, and chunks read in vain (only Bloom false positives led there)."""

    grams: int = 0
    found: int = 0
    chunk_reads: int = 0
    vain_reads: int = 0


class SegmentIndex:
    """The live segments of a state (loaded from its manifest) and lookups over them."""

    def __init__(self, kv: KV, files: SegmentFiles | None = None) -> None:
        self.kv = kv
        self.files = files
        self.writable = not getattr(kv, "read_only", False)
        self.counts = LookupCounts()
        meta = kv.get("meta", b"segments")
        manifest = json.loads(meta) if meta else {"next": 1, "live": []}
        self.next_id: int = manifest["next"]
        self.segments: list[Segment] = [self._load(e) for e in manifest["live"]]
        if self.writable:
            self._drop_orphans()

    def _load(self, entry: list[int]) -> Segment:
        """A live segment's handle: its file mapped; else fences and filter from the KV
        (moved to a file when the segment is big and the state writable); else, neither
        being there, both rebuilt from the chunks."""
        seg_id, n = entry[:2]
        packing = Packing.from_manifest(entry)
        parts = self.files.open(seg_id) if self.files is not None else None
        if len(entry) > 4 and entry[4]:  # its pairs are in its file, and nowhere else
            if parts is None or parts.pair_data is None or parts.pairs != n:
                where = "a state without its files" if self.files is None else \
                    self.files.path(seg_id)
                raise SegmentFileLost(f"segment {seg_id}'s file is missing or not whole "
                                      f"({where}): its gram index is lost; rebuild the "
                                      "state from its inputs")
            return _mapped_parts(seg_id, n, packing, parts)
        if parts is not None:
            return _mapped_parts(seg_id, n, packing, parts)
        raw_fences = self.kv.get("segs", seg_key(seg_id, b"f", 0))
        bloom = self._load_filter(seg_id) if raw_fences is not None else None
        if raw_fences is None or bloom is None:
            return self._rebuilt(seg_id, n, packing)
        fences = np.frombuffer(raw_fences, dtype="<u8").astype(np.uint64)
        seg = Segment(seg_id, n, fences, bloom, packing)
        if (self.files is not None and self.writable and n >= MAPPED_PAIRS
                and isinstance(bloom, SplitBlockBloom)):
            self._move_to_file(seg)
            return self._load(entry)
        return seg

    def _load_filter(self, seg_id: int) -> Filter | None:
        """The segment's split-block filter, or the one-word filter of formats up to 5."""
        raw = self.kv.get("segs", seg_key(seg_id, SPLIT_FILTER, 0))
        if raw is not None:
            return SplitBlockBloom.from_bytes(raw)
        raw = self.kv.get("segs", seg_key(seg_id, WORD_FILTER, 0))
        return None if raw is None else BlockedBloom.from_bytes(raw)

    def _move_to_file(self, seg: Segment) -> None:
        """A big segment's filter and fences written to its file, then deleted from the
        KV (a state written before segment files: its memory stays bounded too)."""
        writer = self.files.writer(seg.id, len(seg.bloom.words))
        writer.words[:] = seg.bloom.words
        writer.add_fences(seg.fences)
        writer.finish(seg.n)
        self.kv.write([("segs", seg_key(seg.id, kind, 0), None)
                       for kind in (b"f", SPLIT_FILTER, WORD_FILTER)])

    def _rebuilt(self, seg_id: int, n: int, packing: Packing) -> Segment:
        """Fences and filter made again from the segment's chunks (its file was lost),
        MERGE_SLICE pairs at a time; written to its file when the state is writable."""
        files = self.files if self.writable and n >= MAPPED_PAIRS else None
        file = files.writer(seg_id, SplitBlockBloom.words_for(n)) if files else None
        bloom = SplitBlockBloom(file.words) if file else SplitBlockBloom.sized(n)
        fences: list[np.ndarray] = []
        raws: list[bytes] = []
        chunks = self.kv.items_between("segs", seg_key(seg_id, b"c", 0), seg_key(seg_id, b"d", 0))
        for _key, raw in chunks:
            raws.append(raw)
            if len(raws) * CHUNK >= MERGE_SLICE:
                fences.append(_add_chunks(raws, packing, bloom, file))
                raws = []
        if raws:
            fences.append(_add_chunks(raws, packing, bloom, file))
        if file is None:
            all_fences = np.concatenate(fences) if fences else np.zeros(0, dtype=np.uint64)
            return Segment(seg_id, n, all_fences, bloom, packing)
        del bloom  # a view of the mapping being closed
        file.finish(n)
        return _mapped(files, seg_id, n, packing)

    def _drop_orphans(self) -> None:
        """Delete segments a crash left outside the manifest (a merge never switched in),
        and their files."""
        live = {s.id for s in self.segments}
        if self.files is not None:
            self.files.remove_orphans(live)
        seg_id = 0
        while (first := next(self.kv.items("segs", seg_key(seg_id, b"\x00", 0)), None)):
            seg_id = _KEY.unpack(first[0])[0]
            if seg_id not in live:
                self.kv.write([_drop_op(seg_id)])
            seg_id += 1

    def manifest_op(self, segments: list[Segment], next_id: int) -> Op:
        live = [s.manifest_entry() for s in segments]
        value = json.dumps({"next": next_id, "live": live})
        return ("meta", b"segments", value.encode())

    # -- lookups --------------------------------------------------------------------------
    def maybe(self, probe: Probe) -> Admitted:
        """Each segment's filter's answer for a batch's grams; `any` is False where no
        segment can hold the gram. `find` reads chunks for these answers without probing
        the filters again."""
        hit = np.zeros(len(probe.grams), dtype=bool)
        per_segment = []
        for s in self.segments:
            admits = s.may_contain(probe)
            hit |= admits
            per_segment.append((s, probe.grams[admits]))
        return Admitted(hit, per_segment)

    def find_pairs(self, grams: np.ndarray, admitted: Admitted | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(grams, their first holders) for the grams given that some segment holds. (A
        gram has one first-holder pair: later holders go to the overlay.) `admitted`: the
        filters' answers for a set of grams that includes these (`maybe`)."""
        none = np.zeros(0, dtype=np.uint64)
        if not len(grams) or not self.segments:
            return none, none
        self.counts.grams += len(grams)
        parts: list[tuple[np.ndarray, np.ndarray]] = [(none, none)]
        for s, cand in self._candidates(grams, admitted):
            chunk_of = np.searchsorted(s.fences, cand, side="right") - 1
            cand, chunk_of = cand[chunk_of >= 0], chunk_of[chunk_of >= 0]
            if not len(cand):
                s.release()
                continue
            chunks = sorted_unique(chunk_of)
            self.counts.chunk_reads += len(chunks)
            if s.in_file:
                g, d, hit_chunks = _find_in_file(s, cand, chunk_of)
                s.release()
            else:
                s.release()
                g, d, hit_chunks = self._find_in_chunks(s, cand, chunk_of, chunks)
            self.counts.vain_reads += len(chunks) - len(sorted_unique(hit_chunks))
            parts.append((g, d))
        found = np.concatenate([g for g, _ in parts])
        holders = np.concatenate([h for _, h in parts])
        self.counts.found += len(found)
        return found, holders

    def _find_in_chunks(self, s: Segment, cand: np.ndarray, chunk_of: np.ndarray,
                        chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`_find_in_file` for a segment whose chunks are in the KV (`chunks`: those the
        candidates fall in, ascending): they are read (one multi-get) and their pairs
        binary-searched, concatenated in index order (chunks hold consecutive gram
        ranges, so that is one sorted array)."""
        keys = [seg_key(s.id, b"c", i) for i in chunks.tolist()]
        cg, cd = s.packing.decode(self.kv.get_many("segs", keys))
        pos = np.minimum(np.searchsorted(cg, cand), len(cg) - 1)
        hit = cg[pos] == cand
        return cand[hit], cd[pos[hit]].astype(np.uint64), chunk_of[hit]

    def _candidates(self, grams: np.ndarray, admitted: Admitted | None
                    ) -> Iterator[tuple[Segment, np.ndarray]]:
        """Per segment, the grams its filter admits: from `admitted` when given (each
        segment's admitted grams that are among `grams`), else by probing the filters."""
        if admitted is None:
            probe = Probe(grams)
            for s in self.segments:
                yield s, grams[s.may_contain(probe)]
            return
        wanted = np.sort(grams)
        for s, cand in admitted.per_segment:
            pos = np.minimum(np.searchsorted(wanted, cand), len(wanted) - 1)
            yield s, cand[wanted[pos] == cand]

    # -- writing --------------------------------------------------------------------------
    def new_segment_ops(self, grams: np.ndarray, docnos: np.ndarray
                        ) -> tuple[list[Op], Op, Segment]:
        """A batch's segment: the ops writing its keys (none when it went to its file,
        written and synced now), the manifest op that makes it live, and its handle; apply
        with `installed` after."""
        # grams are distinct, so the default sort serves (engine.sorting): a batch's are
        # ~130 sorted runs, too many for a timsort to gain by them
        order = np.argsort(grams)
        seg_id = self.next_id
        keys, seg = segment_ops(seg_id, grams[order], docnos[order], self.files)
        return keys, self.manifest_op(self.segments + [seg], seg_id + 1), seg

    def installed(self, seg: Segment) -> None:
        """The segment's ops were committed."""
        self.segments.append(seg)
        self.next_id = max(self.next_id, seg.id + 1)

    def merge_candidates(self) -> list[Segment] | None:
        """The segments to merge next: MERGE_FANIN of the smallest crowded tier."""
        by_tier: dict[int, list[Segment]] = {}
        for s in self.segments:
            if s.n < MAX_MERGED:
                by_tier.setdefault(s.tier, []).append(s)
        for tier in sorted(by_tier):
            if len(by_tier[tier]) >= MERGE_FANIN:
                return sorted(by_tier[tier], key=lambda s: s.id)[:MERGE_FANIN]
        return None

    def merge(self, group: list[Segment], withdrawn: set[int]) -> None:
        """Merge `group` into one segment, dropping withdrawn holders; crash-safe."""
        seg_id = self.next_id
        self.next_id += 1
        writer = SegmentWriter(seg_id, sum(s.n for s in group),
                               Packing.spanning([s.packing for s in group]), self.files)
        try:
            # an orphan until switched in (a mapped one's writes go to its file)
            self.kv.write(self._merged_chunks(writer, group, withdrawn))
            ops, merged = writer.finish()
        except BaseException:
            writer.abandon()
            raise
        self.kv.write(ops)
        gone = {s.id for s in group}
        survivors = [s for s in self.segments if s.id not in gone] + [merged]
        switch: list[Op] = [self.manifest_op(survivors, self.next_id)]
        switch.extend(_drop_op(s.id) for s in group)
        # synced: the merged segments' files, their pairs' only copy, go next
        self.kv.write(switch, sync=True)
        self.segments = survivors
        if self.files is not None:
            self.files.remove(gone)
        in_kv = [s for s in group if not s.in_file]
        if (sum(s.n for s in in_kv) >= RECLAIM_PAIRS
                or any(s.n >= INGESTED_PAIRS // 4 for s in in_kv)):
            for s in in_kv:
                self.kv.reclaim("segs", *_key_range(s.id))

    def _merged_chunks(self, writer: SegmentWriter, group: list[Segment],
                       withdrawn: set[int]) -> Iterator[Op]:
        """The merged segment's chunk ops, made a slice at a time as they are written (one
        file or write batch for the whole merge, one slice's pairs in memory)."""
        for g, d in self._slices(group):
            if withdrawn:
                g, d = self._without_withdrawn(g, d, withdrawn)
            yield from writer.add(g, d)

    def _slices(self, group: list[Segment]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The group's pairs in ascending gram order, about MERGE_SLICE at a time: the gram
        range is cut at chunk fences, and a slice reads only the chunks that overlap it
        (a chunk covers its fence up to the next one)."""
        fences = np.sort(np.concatenate([s.fences for s in group]))
        cuts = list(fences[max(1, MERGE_SLICE // CHUNK)::max(1, MERGE_SLICE // CHUNK)])
        for lo, hi in zip([None, *cuts], [*cuts, None], strict=True):
            gs, ds = [], []
            for s in group:
                first = 0 if lo is None else max(0, int(np.searchsorted(s.fences, lo,
                                                                        "right")) - 1)
                end = len(s.fences) if hi is None else int(np.searchsorted(s.fences, hi))
                if first >= end:
                    continue
                g, d = self._chunks(s, first, end)
                keep = np.ones(len(g), dtype=bool)
                if lo is not None:
                    keep &= g >= lo
                if hi is not None:
                    keep &= g < hi
                gs.append(g[keep])
                ds.append(d[keep])
            if gs:
                g, d = np.concatenate(gs), np.concatenate(ds)
                # a gram has one first holder, so grams are distinct across segments; each
                # segment's part is a sorted run, which the stable sort (timsort) merges fast
                order = np.argsort(g, kind="stable")
                yield g[order], d[order]

    def _chunks(self, s: Segment, first: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """The pairs of chunks [first, end) of a segment (copied out of a mapped file,
        whose pages are then dropped from the process)."""
        if not s.in_file:
            keys = [seg_key(s.id, b"c", i) for i in range(first, end)]
            return s.packing.decode(self.kv.get_many("segs", keys))
        grams, rel = s.pair_columns()
        lo, hi = first * CHUNK, min(end * CHUNK, s.n)
        out = grams[lo:hi].astype(np.uint64), s.packing.docnos(rel[lo:hi])
        s.release_pairs(lo, hi)
        return out

    def _without_withdrawn(self, g: np.ndarray, d: np.ndarray, withdrawn: set[int]):
        """Drop pairs of withdrawn holders, except for grams in the overlay: those must
        stay findable through the Bloom filters (a lookup reads the overlay only for grams
        some segment may hold)."""
        is_withdrawn = np.isin(d, np.fromiter(withdrawn, dtype=np.uint64, count=len(withdrawn)))
        if not is_withdrawn.any():
            return g, d
        withdrawn_grams = g[is_withdrawn]
        in_overlay = np.fromiter(
            (v is not None for v in self.kv.get_many("grams", u64keys(withdrawn_grams))),
            dtype=bool, count=len(withdrawn_grams))
        drop = is_withdrawn.copy()
        drop[np.flatnonzero(is_withdrawn)[in_overlay]] = False
        return g[~drop], d[~drop]

    def compact(self, withdrawn: set[int]) -> int:
        """Run merges until no tier is crowded; returns how many were done."""
        done = 0
        while (group := self.merge_candidates()) is not None:
            self.merge(group, withdrawn)
            done += 1
        return done

    @property
    def pairs(self) -> int:
        return sum(s.n for s in self.segments)

    @property
    def ram_bytes(self) -> int:
        """Bytes of filters and fences held in memory (mapped ones are not)."""
        return sum(s.bloom.nbytes + s.fences.nbytes for s in self.segments if s.parts is None)

    @property
    def mapped_bytes(self) -> int:
        """Bytes of filters and fences in segment files (in the page cache when used)."""
        return sum(s.bloom.nbytes + s.fences.nbytes for s in self.segments if s.parts)
