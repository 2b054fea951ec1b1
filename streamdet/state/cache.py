"""A bounded map that keeps what is used again and forgets the rest, cheaply.

Two generations of plain dicts: new and re-used entries go to the young one; once it holds
half the capacity it becomes the old one and the previous old one is dropped. An entry
found in the old generation moves back to the young one, so anything used at least once
per half-capacity of insertions stays. Unlike an LRU there is no per-access bookkeeping
(no linked list, no move-to-end): a lookup is one or two dict probes, which matters when a
batch looks up hundreds of thousands of keys.
"""

from __future__ import annotations

from collections.abc import Iterable


class Generations:
    """About `capacity` entries at most; get / put / update / get_many are the interface."""

    def __init__(self, capacity: int) -> None:
        self.half = max(1, capacity // 2)
        self.young: dict = {}
        self.old: dict = {}
        self.dropped = False  # whether any entry was ever forgotten

    def __len__(self) -> int:
        return len(self.young) + len(self.old)

    def get(self, key):
        v = self.young.get(key)
        if v is None:
            v = self.old.pop(key, None)
            if v is not None:
                self.put(key, v)
        return v

    def put(self, key, value) -> None:
        self.young[key] = value
        if len(self.young) >= self.half:
            self._age()

    def update(self, entries: dict) -> None:
        """Put many entries at once (one C-level dict update; the young generation may
        then exceed half the capacity by what `entries` holds beyond it)."""
        if len(self.young) + len(entries) > self.half:
            self._age()
        self.young.update(entries)

    def _age(self) -> None:
        """The young generation becomes the old one; the old one is forgotten."""
        self.dropped = self.dropped or bool(self.old)
        self.old = self.young
        self.young = {}

    def get_many(self, keys: Iterable, into: dict) -> list:
        """Copy the entries of `keys` into `into`; return the keys it does not hold."""
        missing = []
        young, old = self.young, self.old
        for k in keys:
            v = young.get(k)
            if v is None:
                v = old.pop(k, None)
                if v is None:
                    missing.append(k)
                    continue
                self.put(k, v)
                young, old = self.young, self.old
            into[k] = v
        return missing

    def discard(self, key) -> None:
        self.young.pop(key, None)
        self.old.pop(key, None)

    def clear(self) -> None:
        self.dropped = self.dropped or len(self) > 0
        self.young = {}
        self.old = {}
