"""What a state writes, per table: operations and bytes (keys and values).

A page's cost is largely what it makes the state write (its gram postings, documents,
sentence keys, chunks, ...), and each table's share moves as the state grows: operators
watch it as a metric (adapters.metrics), benchmarks print it a page (loadtest's
engine_windows --writes). The backends count what each committed write carried; readers
take the counts since they last asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class WriteCounts:
    """Operations and bytes written per table since the counts were last taken."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}

    def slot(self, table: str) -> list[int]:
        """The table's [operations, bytes], for a backend to add to as it writes."""
        counts = self._counts.get(table)
        if counts is None:
            counts = self._counts[table] = [0, 0]
        return counts

    def merge(self, other: Mapping[str, Sequence[int]]) -> None:
        """Add counts: a committed write's (a failed write adds none), or other states'."""
        for table, (ops, nbytes) in other.items():
            mine = self.slot(table)
            mine[0] += ops
            mine[1] += nbytes

    def take(self) -> dict[str, tuple[int, int]]:
        """table -> (operations, bytes) since the last call, and start again."""
        out = {t: (c[0], c[1]) for t, c in self._counts.items() if c[0]}
        self._counts = {}
        return out


def count_ops(ops_of: dict[str, list[int]], table: str, key: bytes, value) -> None:
    """Count one operation of a write in progress: a put's key and value bytes, a delete's
    key (a range delete counts its two bounds)."""
    counts = ops_of.get(table)
    if counts is None:
        counts = ops_of[table] = [0, 0]
    counts[0] += 1
    if value is None:
        counts[1] += len(key)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        counts[1] += len(key) + len(value)
    else:  # a DeleteRange
        counts[1] += len(key) + len(value.end)
