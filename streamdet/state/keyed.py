"""A table of keyed records read and written through a transaction: what a detector keeps
beside the gram index (partial duplicates, near-duplicate clusters), a few records per
document or key, each detector telling its kinds apart by a prefix byte.

Reads go to the KV once per key and transaction (a batched read for many), writes stay
in memory until the transaction commits them with everything else.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..engine.keyed import prefix_end
from .kv import KV, Op

_MISSING = object()


class KeyedTable:
    """`group`: the length of the key prefixes `under` asks for; this transaction's
    writes of keys starting with a byte of `grouped` are indexed by it, so that a scan
    looks at the writes under its prefix only."""

    def __init__(self, kv: KV, table: str, group: int = 0, grouped: bytes = b"") -> None:
        self.kv = kv
        self.table = table
        self.values: dict[bytes, bytes | None] = {}  # read and written
        self.dirty: set[bytes] = set()
        self.group = group
        self.grouped = frozenset(grouped)  # the first bytes of the keys indexed by prefix
        self.groups: dict[bytes, set[bytes]] = {}  # written keys by their prefix

    def get(self, key: bytes) -> bytes | None:
        v = self.values.get(key, _MISSING)
        if v is _MISSING:
            v = self.values[key] = self.kv.get(self.table, key)
        return v

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Several records in one batched read (those not read or written before)."""
        get = self.values.get
        values = [get(k, _MISSING) for k in keys]
        missing = [k for k, v in zip(keys, values, strict=True) if v is _MISSING]
        if missing:
            self.values.update(zip(missing, self.kv.get_many(self.table, missing),
                                   strict=True))
            values = [get(k) for k in keys]
        return values

    def absent(self, keys: list[bytes]) -> None:
        """Keys the caller knows have no record (nothing written): later reads of them
        need not ask the KV."""
        values = self.values
        for key in keys:
            values.setdefault(key, None)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.values[key] = value or None
        self.dirty.add(key)
        if key[0] in self.grouped:
            self.groups.setdefault(key[: self.group], set()).add(key)

    def put_many(self, keys: list[bytes], value: bytes) -> None:
        """The same value for many records."""
        self.put_each(keys, [value] * len(keys))

    def put_each(self, keys: list[bytes], values: list[bytes]) -> None:
        """Many records at once."""
        self.values.update(zip(keys, values, strict=True))
        self.dirty.update(keys)
        if self.grouped:
            for key in keys:
                if key[0] in self.grouped:
                    self.groups.setdefault(key[: self.group], set()).add(key)

    def scan(self, start: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        """Every record with start <= key < end as this transaction sees them, in key
        order: the KV's, with this transaction's writes over them (each scan looks at
        every write of the transaction: for the few scans a batch makes)."""
        return self._merged(start, end, (k for k in self.dirty if start <= k < end))

    def walk(self, start: bytes, end: bytes, back: bool = False
             ) -> Iterator[tuple[bytes, bytes]]:
        """`scan(start, end)` read lazily, greatest key first if `back`: a reader that
        takes the first few of a long range reads those alone. A transaction that wrote
        into the range gets its merged scan (the few scans a batch makes)."""
        if any(start <= k < end for k in self.dirty):
            merged = self.scan(start, end)
            yield from reversed(merged) if back else merged
        else:
            yield from self._committed(start, end, back)

    def _committed(self, start: bytes, end: bytes, back: bool = False
                   ) -> Iterator[tuple[bytes, bytes]]:
        """The KV's records with start <= key < end, in key order (greatest first if
        `back`), without this transaction's writes."""
        if back:
            for key, raw in self.kv.items_back(self.table, end):
                if key < start:
                    return
                yield key, raw
        else:
            yield from self.kv.items_between(self.table, start, end)

    def under(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every record whose key starts with `prefix`, of the `group` length (a chunk's
        holders), looking at this transaction's writes under it alone."""
        assert len(prefix) == self.group, "under() needs the table's group length"
        return self._merged(prefix, prefix_end(prefix), self.groups.get(prefix, ()))

    def _merged(self, start: bytes, end: bytes, written) -> list[tuple[bytes, bytes]]:
        found = dict(self._committed(start, end))
        values = self.values
        for key in written:
            found[key] = values[key]
        return sorted((k, v) for k, v in found.items() if v is not None)

    def ops(self) -> list[Op]:
        values = self.values
        return [(self.table, key, values[key]) for key in self.dirty]
