"""A big segment's Bloom filter and chunk fences in a file of their own, mapped into the
process only while a lookup reads them.

Filters and fences take ~3 bytes per first-holder pair, and a state holds one pair per
distinct gram: ~1e9 pairs, 3 GB, at 500,000 documents, more than any memory budget a
worker runs in (`--memory`, state.budget): held as numpy arrays, they would be the part
of a worker's memory that grows with the state without bound. In a file they live in the
operating system's page cache instead, which the kernel shares out and reclaims, and the
process maps them: a lookup touches only the pages its grams fall in, with no copy (a
RocksDB read of the same bytes copies them, and a batch's million grams touch every page
of every filter). After each window of a lookup the pages are dropped from the process
(madvise DONTNEED on a shared file mapping: the next touch maps them again from the page
cache), so the resident share of a lookup is one window, whatever the state's size.

A file holds one segment: a header page, the filter's words (little-endian u64), then the
fences (u64), each starting on a page. It is written under a temporary name, synced and
renamed before the manifest that makes its segment live is written, so a crash leaves at
worst an orphan, deleted on the next writable open (state.segments). The chunks in the KV
stay the segment's truth: a missing or damaged file is rebuilt from them.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable

import numpy as np

MAGIC = b"SDSEGF01"
_HEADER = struct.Struct("<8sQQQ")  # magic, filter words, fences, pairs
PAGE = mmap.PAGESIZE
DATA_AT = max(PAGE, 4096)  # the filter's first word
WINDOW_BYTES = 16 << 20  # filter bytes a lookup holds mapped at a time
SUFFIX = ".seg"


def _pages(nbytes: int) -> int:
    """nbytes rounded up to whole pages."""
    return -(-nbytes // DATA_AT) * DATA_AT


class MappedParts:
    """A segment file mapped read-only: its filter words and fences as numpy arrays over
    the mapping (no copy), and `release` to drop the pages a lookup touched."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, n_words, n_fences, self.pairs = _HEADER.unpack_from(self._map, 0)
        fences_at = DATA_AT + _pages(n_words * 8)
        if magic != MAGIC or len(self._map) != fences_at + n_fences * 8:
            self._map.close()
            raise ValueError(f"{path} is not a whole segment file")
        self.words = np.frombuffer(self._map, dtype="<u8", count=n_words, offset=DATA_AT)
        self.fences = np.frombuffer(self._map, dtype="<u8", count=n_fences, offset=fences_at)
        self.words_at = DATA_AT

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
    appended as they come, the header last."""

    def __init__(self, path: str, n_words: int) -> None:
        self.path, self.tmp = path, path + ".tmp"
        self.n_words = n_words
        self._fences_at = DATA_AT + _pages(n_words * 8)
        self._fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, self._fences_at)
        self._map = mmap.mmap(self._fd, self._fences_at)
        self.words = np.frombuffer(self._map, dtype="<u8", count=n_words, offset=DATA_AT)
        self.n_fences = 0

    def add_fences(self, fences: np.ndarray) -> None:
        data = fences.astype("<u8").tobytes()
        os.pwrite(self._fd, data, self._fences_at + self.n_fences * 8)
        self.n_fences += len(fences)

    def release_below(self, word: int) -> None:
        """The filter's words before `word` are final (grams come sorted): drop them."""
        end = (DATA_AT + word * 8) // PAGE * PAGE
        if end > 0:
            self._map.madvise(mmap.MADV_DONTNEED, 0, end)

    def finish(self, pairs: int) -> None:
        """Header, sync, rename: the file is whole under its name or not there."""
        _HEADER.pack_into(self._map, 0, MAGIC, self.n_words, self.n_fences, pairs)
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

    def writer(self, seg_id: int, n_words: int) -> FileWriter:
        return FileWriter(self.path(seg_id), n_words)

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
