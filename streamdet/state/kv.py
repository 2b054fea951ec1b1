"""The key-value interface every state backend implements, and the in-memory backend.

Keys live in a few named tables (column families in RocksDB). A write is a list of
operations applied atomically: all of a batch's state changes and its input position land
together or not at all, which is what makes a SIGKILL at any moment recoverable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Iterable, Iterator

from .write_counts import WriteCounts, count_ops

TABLES = ("grams", "segs", "docs", "slots", "names", "urls", "dead", "meta", "docgrams",
          "docdelta", "docadds", "recent", "early", "texts", "partials", "near",
          "popular", "sites", "chunks", "stale")


class DeleteRange:
    """Op value: delete every key from the op's key (inclusive) to `end` (exclusive)."""

    __slots__ = ("end",)

    def __init__(self, end: bytes) -> None:
        self.end = end


Op = tuple[str, bytes, "bytes | DeleteRange | None"]  # value None deletes the key


class KV(ABC):
    """Named tables of bytes -> bytes with atomic multi-table writes. Each backend counts
    what its committed writes carried (`written`, state.write_counts)."""

    written: WriteCounts

    def take_written(self) -> dict[str, tuple[int, int]]:
        """table -> (operations, bytes) written since the last call."""
        return self.written.take()

    @abstractmethod
    def get(self, table: str, key: bytes) -> bytes | None: ...

    @abstractmethod
    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]: ...

    @abstractmethod
    def items(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """All (key, value) pairs of a table with key >= start, in key order."""

    def items_between(self, table: str, start: bytes, end: bytes
                      ) -> Iterator[tuple[bytes, bytes]]:
        """The (key, value) pairs of a table with start <= key < end, in key order (a
        backend may stop its iterator at `end` itself)."""
        for key, raw in self.items(table, start):
            if key >= end:
                return
            yield key, raw

    @abstractmethod
    def items_back(self, table: str, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """All (key, value) pairs of a table with key < end, greatest key first: a ranking
        kept in key order is read from its top without reading the rest."""

    @abstractmethod
    def last_key(self, table: str) -> bytes | None:
        """The greatest key of a table (None when it is empty)."""

    @abstractmethod
    def write(self, ops: Iterable[Op], sync: bool = False) -> None:
        """Apply all operations atomically. `sync`: durable before it returns, through a
        power loss too (a write that files outside the KV then rely on)."""

    def reclaim(self, table: str, start: bytes, end: bytes) -> None:  # noqa: B027
        """Hint: keys in [start, end) were deleted in bulk; free their space now rather than
        whenever the backend gets round to it."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the backend; the state stays readable by a new instance."""

    def disk_bytes(self) -> int:
        """Bytes the state occupies on disk (0 when it has no disk)."""
        return 0


class MemoryKV(KV):
    """Dictionaries, for tests and throwaway runs; same semantics as RocksDB. A table's
    keys are sorted once for all the scans until its next write (a transaction's reads see
    no writes of their own), not once a scan."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[bytes, bytes]] = {t: {} for t in TABLES}
        self._sorted: dict[str, list[bytes]] = {}
        self.written = WriteCounts()

    def _keys(self, table: str) -> list[bytes]:
        keys = self._sorted.get(table)
        if keys is None:
            keys = self._sorted[table] = sorted(self._tables[table])
        return keys

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._tables[table].get(key)

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        t = self._tables[table]
        return [t.get(k) for k in keys]

    def items(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        t, keys = self._tables[table], self._keys(table)
        for k in keys[bisect_left(keys, start):]:
            if k in t:  # (a write during the scan drops the cached order, not this list)
                yield k, t[k]

    def items_back(self, table: str, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        t, keys = self._tables[table], self._keys(table)
        for k in reversed(keys[: bisect_left(keys, end)]):
            if k in t:
                yield k, t[k]

    def last_key(self, table: str) -> bytes | None:
        keys = self._keys(table)
        return keys[-1] if keys else None

    def write(self, ops: Iterable[Op], sync: bool = False) -> None:
        ops = list(ops)  # materialise first: a failing iterator must not half-apply
        counts: dict[str, list[int]] = {}
        for table, key, value in ops:  # first: an unknown table must not half-apply
            if table not in self._tables:
                raise KeyError(table)
            count_ops(counts, table, key, value)
        for table, key, value in ops:
            t = self._tables[table]
            self._sorted.pop(table, None)
            if value is None:
                t.pop(key, None)
            elif isinstance(value, DeleteRange):
                for k in [k for k in t if key <= k < value.end]:
                    del t[k]
            else:
                t[key] = value
        self.written.merge(counts)
