"""A big segment in a file of its own: its pairs, Bloom filter and chunk fences, mapped
into the process only while a lookup reads them.

A state holds one first-holder pair per distinct gram: ~1e9 pairs at 500,000 documents,
11 GB of pairs and 3 GB of filters and fences, more than any memory budget a worker runs
in (`--memory`, state.budget). In a file they live in the operating system's page cache
instead, which the kernel shares out and reclaims, and the process maps them: a lookup
touches only the pages its grams fall in, with no copy. A RocksDB read of a chunk of pairs
costs a block-cache lookup, a read of the file, a decompression and a copy into a Python
object; a batch's million grams touch every page of every filter, and most pages of the
pairs. A lookup goes through a segment a window at a time (WINDOW_BYTES of filter, or of
pairs), and drops each window's pages from the process after it (madvise DONTNEED on a
shared file mapping: the next touch maps them again from the page cache), so the resident
share of a lookup is one window, whatever the state's size.

A file holds one segment: a header page, the filter's words (little-endian u64), the
fences (u64, room for `fence_room` of them), then the pairs as state.segments.Packing
lays them out (8 bytes of padding after the last), each part starting on a page. A file
without pairs (`pair_bytes` 0, and every file of magic SDSEGF01) belongs to a segment
whose pairs are chunks in the KV: one written before segments kept their pairs in files.
A file is written under a temporary name, synced and renamed before the manifest that
makes its segment live is written, so a crash leaves at worst an orphan, deleted on the
next writable open (state.segments). A file that holds its segment's pairs is their only
copy; one without them is rebuilt from the chunks when lost.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable

import numpy as np

from .rocks import StateDirError

MAGIC = b"SDSEGF02"
MAGIC_WITHOUT_PAIRS = b"SDSEGF01"  # filter and fences only (pairs in the KV)
_HEADER = struct.Struct("<8sQQQQQ")  # magic, filter words, fences, pairs, fence room, pair bytes
_OLD_HEADER = struct.Struct("<8sQQQ")  # magic, filter words, fences, pairs
PAD = 8  # bytes after the last pair: every pair's docno is read as an unaligned u64
PAGE = mmap.PAGESIZE
DATA_AT = max(PAGE, 4096)  # the filter's first word
WINDOW_BYTES = 16 << 20  # filter bytes, or pair bytes, a lookup holds mapped at a time
SUFFIX = ".seg"


class SegmentFileLost(StateDirError):
    """A segment file that holds its segment's pairs is missing or not whole: the pairs
    are lost with it, and the state must be rebuilt from its inputs."""


def _pages(nbytes: int) -> int:
    """nbytes rounded up to whole pages."""
    return -(-nbytes // DATA_AT) * DATA_AT


def _layout(n_words: int, fence_room: int) -> tuple[int, int]:
    """Where the fences and the pairs start."""
    fences_at = DATA_AT + _pages(n_words * 8)
    return fences_at, fences_at + _pages(fence_room * 8)


class MappedParts:
    """A segment file mapped read-only: its filter words, fences and pairs (the bytes, or
    None when the file holds none) as numpy arrays over the mapping (no copy), and
    `release` to drop the pages a lookup touched."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            n_words, n_fences, self.pairs, room, self.pair_bytes = self._header(path)
            fences_at, self.pairs_at = _layout(n_words, room)
            end = (self.pairs_at + self.pairs * self.pair_bytes + PAD if self.pair_bytes
                   else fences_at + n_fences * 8)
            if len(self._map) != end:
                raise ValueError(f"{path} is not a whole segment file")
        except ValueError:
            self._map.close()
            raise
        self.words = np.frombuffer(self._map, dtype="<u8", count=n_words, offset=DATA_AT)
        self.fences = np.frombuffer(self._map, dtype="<u8", count=n_fences, offset=fences_at)
        self.pair_data = None if not self.pair_bytes else np.frombuffer(
            self._map, dtype=np.uint8, count=self.pairs * self.pair_bytes + PAD,
            offset=self.pairs_at)
        self.words_at = DATA_AT

    def _header(self, path: str) -> tuple[int, int, int, int, int]:
        """(filter words, fences, pairs, fence room, bytes a pair): a file of the layout
        without pairs has no room and no pair bytes; one that is no segment file (or too
        short for a header) raises ValueError."""
        magic = bytes(self._map[:8]) if len(self._map) >= DATA_AT else b""
        if magic == MAGIC_WITHOUT_PAIRS:
            return (*_OLD_HEADER.unpack_from(self._map, 0)[1:], 0, 0)
        if magic == MAGIC:
            return _HEADER.unpack_from(self._map, 0)[1:]
        raise ValueError(f"{path} is not a segment file")

    def release(self, start: int = 0, length: int | None = None) -> None:
        """Drop the mapped pages of [start, start + length) (bytes into the file, rounded
        out to pages) from this process; the page cache keeps them."""
        end = len(self._map) if length is None else min(len(self._map), start + length)
        start = start // PAGE * PAGE
        if end > start:
            self._map.madvise(mmap.MADV_DONTNEED, start, end - start)


class FileWriter:
    """Writes one segment file: the filter words in a writable shared mapping (the pages
    written are dropped from the process as the sorted grams move past them), the fences
    and the pairs appended as they come, the header last. `fence_room`: at least the
    fences to come, when the pairs come too (`pair_bytes` each); 0 for a file of a
    segment whose pairs are in the KV."""

    def __init__(self, path: str, n_words: int, fence_room: int = 0, pair_bytes: int = 0
                 ) -> None:
        self.path, self.tmp = path, path + ".tmp"
        self.n_words, self.fence_room, self.pair_bytes = n_words, fence_room, pair_bytes
        self._fences_at, self._pairs_at = _layout(n_words, fence_room)
        self._fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, self._fences_at)
        self._map = mmap.mmap(self._fd, self._fences_at)
        self.words = np.frombuffer(self._map, dtype="<u8", count=n_words, offset=DATA_AT)
        self.n_fences = 0
        self._pair_end = self._pairs_at

    def add_fences(self, fences: np.ndarray) -> None:
        if self.pair_bytes and self.n_fences + len(fences) > self.fence_room:
            raise ValueError("more fences than the file has room for")
        data = fences.astype("<u8").tobytes()
        os.pwrite(self._fd, data, self._fences_at + self.n_fences * 8)
        self.n_fences += len(fences)

    def add_pairs(self, packed: bytes) -> None:
        """Pairs as the segment's Packing lays them out, after those added before."""
        os.pwrite(self._fd, packed, self._pair_end)
        self._pair_end += len(packed)

    def release_below(self, word: int) -> None:
        """The filter's words before `word` are final (grams come sorted): drop them."""
        end = (DATA_AT + word * 8) // PAGE * PAGE
        if end > 0:
            self._map.madvise(mmap.MADV_DONTNEED, 0, end)

    def finish(self, pairs: int) -> None:
        """Header, sync, rename: the file is whole under its name or not there."""
        if self.pair_bytes:
            if self._pair_end != self._pairs_at + pairs * self.pair_bytes:
                raise ValueError("the pairs written are not the segment's")
            os.pwrite(self._fd, bytes(PAD), self._pair_end)
        _HEADER.pack_into(self._map, 0, MAGIC, self.n_words, self.n_fences, pairs,
                          self.fence_room, self.pair_bytes)
        self._map.flush()
        self.words = None  # type: ignore[assignment]
        try:
            self._map.close()
        except BufferError:  # a view of the words is still held: unmapped when it goes
            pass
        os.fsync(self._fd)
        os.close(self._fd)
        os.replace(self.tmp, self.path)
        _sync_dir(os.path.dirname(self.path))

    def abandon(self) -> None:
        self.words = None  # type: ignore[assignment]
        try:
            self._map.close()
        except BufferError:
            pass
        finally:
            os.close(self._fd)
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentFiles:
    """The directory of a state's segment files (`<state>/segments`)."""

    def __init__(self, directory: str, writable: bool) -> None:
        self.directory = directory
        self.writable = writable
        if writable:
            os.makedirs(directory, exist_ok=True)

    def path(self, seg_id: int) -> str:
        return os.path.join(self.directory, f"{seg_id:010d}{SUFFIX}")

    def writer(self, seg_id: int, n_words: int, fence_room: int = 0, pair_bytes: int = 0
               ) -> FileWriter:
        return FileWriter(self.path(seg_id), n_words, fence_room, pair_bytes)

    def open(self, seg_id: int) -> MappedParts | None:
        """The segment's file mapped, or None when it is missing or not whole."""
        try:
            return MappedParts(self.path(seg_id))
        except (OSError, ValueError):
            return None

    def remove(self, seg_ids: Iterable[int]) -> None:
        for seg_id in seg_ids:
            try:
                os.unlink(self.path(seg_id))
            except FileNotFoundError:
                pass

    def remove_orphans(self, live: set[int]) -> None:
        """Delete files of segments outside the manifest, and unfinished ones."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for name in names:
            stem = name.split(".", 1)[0]
            if name.endswith(".tmp") or (stem.isdigit() and int(stem) not in live):
                os.unlink(os.path.join(self.directory, name))
