"""What a detector needs of its table in the state: keyed records, read and written in a
transaction (the narrow storage interface the engine is written against; state.keyed.
KeyedTable implements it over RocksDB or memory, and a test may implement it over a dict).

A detector keeps its few kinds of record in one table, told apart by a prefix byte; its
role's view names the table it needs (`sites: KeyedRecords`), never the transaction's
other tables. Numbers in keys (docnos, grams, sentence and chunk keys) are 8 bytes
big-endian, so that keys sort as their numbers do (u64key, u64keys, key_u64).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np


class KeyedRecords(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...
    def put(self, key: bytes, value: bytes | None) -> None: ...
    def put_many(self, keys: list[bytes], value: bytes) -> None: ...
    def put_each(self, keys: list[bytes], values: list[bytes]) -> None: ...
    def absent(self, keys: list[bytes]) -> None: ...
    def scan(self, start: bytes, end: bytes) -> list[tuple[bytes, bytes]]: ...
    def walk(self, start: bytes, end: bytes, back: bool = False
             ) -> Iterator[tuple[bytes, bytes]]: ...
    def under(self, prefix: bytes) -> list[tuple[bytes, bytes]]: ...


def u64key(n: int) -> bytes:
    return n.to_bytes(8, "big")


def u64keys(values: np.ndarray) -> list[bytes]:
    """The 8-byte big-endian keys of many uint64 values (gram keys of the overlay).
    Items of an 8-byte void dtype come out as bytes, 7x faster than slicing one blob (an
    "S8" view would strip trailing zero bytes)."""
    return np.asarray(values, dtype=np.uint64).astype(">u8").view("V8").tolist()


def prefix_end(prefix: bytes) -> bytes:
    """The least key greater than every key that starts with `prefix` (not all 0xff)."""
    head = prefix.rstrip(b"\xff")
    return head[:-1] + bytes([head[-1] + 1])


def key_u64(b: bytes) -> int:
    return int.from_bytes(b, "big")
