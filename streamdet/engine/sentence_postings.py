"""The sentence-key role (SPEC §7): postings of up to m documents per sentence key, and
the links they imply between documents.

It is the gram role's rule for sentence keys (engine.postings): a key on more than m live
documents is common (a sticky marker, the same documented exception as for grams), and
every other key shared by two documents links them. For an arriving document d and each
of its keys with live holders L (|L| = n):
  n = 0        -> posting (d,)
  1 <= n < m   -> posting L + d; d and each holder are linked on the key
  n = m        -> the key becomes common; each holder unlinks it from all its partners
  common       -> nothing
A withdrawn version leaves its keys' postings; the holders left unlink it on them.

A link carries the partner's *rows* for the keys it concerns: (key, position, start, end)
of each of the partner's sentences holding one. The doc role needs nothing else of the
partner to find the diagonals (engine.diagonals), so a doc shard learns what it needs of
a page on another shard from these messages, never by reading that shard's state. A role
keeps the rows of its documents' keys (all of them in one process, the keys hashed to it
in a shard).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from .keyed import u64key, u64keys
from .sentences import NO_KEY, Sentences
from .sorting import sorted_unique

COMMON_MARK = b"c"


class LinkOp(IntEnum):
    LINK = 0  # the target shares these keys with the partner: rows are the partner's
    UNLINK = 1  # the target no longer shares these keys (rows[:, 0]) with the partner
    COMMON = 2  # these keys (rows[:, 0]) went common: unlink them from every partner


LINK, UNLINK, COMMON = LinkOp


class Link(NamedTuple):
    target: int  # docno whose partners change
    op: int  # a LinkOp
    partner: int  # 0 for COMMON
    rows: np.ndarray  # uint64 (n, 4): key, position, start, end
    cause: str  # URL of the record whose arrival produced it


def posting_keys(keys: np.ndarray) -> list[bytes]:
    """The records of the postings of these sentence keys."""
    return [b"k" + k for k in u64keys(keys)]


def prefetch(txn, rows: list[np.ndarray]) -> np.ndarray:
    """Read the postings of a batch's keys in one batched read (add_keys and
    withdraw_keys then find them in the transaction). Returns the batch's *fresh* keys
    (sorted): no posting yet, and held by one version of the batch only: most keys of a
    page, which add_keys gives their first holder without looking at them one by one."""
    keys = [sorted_unique(r[:, 0]) for r in rows if len(r)]
    if not keys:
        return np.zeros(0, dtype=np.uint64)
    keys, counts = np.unique(np.concatenate(keys), return_counts=True)
    raws = txn.partials.get_many(posting_keys(keys))
    absent = np.fromiter((raw is None for raw in raws), dtype=bool, count=len(raws))
    return keys[absent & (counts == 1)]


def rows_key(docno: int) -> bytes:
    return b"f" + u64key(docno)


def rows_of(s: Sentences) -> np.ndarray:
    """A document's sentences as rows (key, position, start, end), but for those common
    in it (NO_KEY: they match nothing, so they are never posted)."""
    n = len(s)
    if not n:
        return np.zeros((0, 4), np.uint64)
    rows = np.stack([s.keys, np.arange(n, dtype=np.uint64), s.starts.astype(np.uint64),
                     s.ends.astype(np.uint64)], axis=1)
    return rows[s.keys != NO_KEY]


def encode_rows(rows: np.ndarray) -> bytes:
    return np.ascontiguousarray(rows, dtype="<u8").tobytes()


def decode_rows(raw: bytes | None) -> np.ndarray:
    if not raw:
        return np.zeros((0, 4), dtype=np.uint64)
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64).reshape(-1, 4)


def keys_rows(keys: list[int]) -> np.ndarray:
    """Rows naming keys only (UNLINK, COMMON)."""
    out = np.zeros((len(keys), 4), dtype=np.uint64)
    out[:, 0] = keys
    return out


def _decode_posting(raw: bytes | None) -> tuple[int, ...] | None:
    """None: no holder; () common; else the holders."""
    if raw is None:
        return None
    if raw == COMMON_MARK:
        return ()
    return tuple(np.frombuffer(raw, dtype="<u8").tolist())


def _encode_posting(holders: tuple[int, ...]) -> bytes | None:
    return np.asarray(holders, dtype="<u8").tobytes() if holders else None


def member(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Mask of the values that are one of `keys` (sorted): a sorted lookup (np.isin
    sorts both sides, and is ~10x slower on a few dozen values)."""
    if not len(keys) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(keys, values), len(keys) - 1)
    return keys[at] == values


def holding(rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Mask of the rows whose key is one of `keys` (sorted)."""
    return member(rows[:, 0], keys)


def _select(rows: np.ndarray, keys: list[int]) -> np.ndarray:
    """The rows of these keys (in ascending order, as add_keys collects them)."""
    return rows[holding(rows, np.asarray(keys, dtype=np.uint64))]


def add_keys(txn, docno: int, rows: np.ndarray, m: int,
             rows_of_holders: Callable[[list[int]], dict[int, np.ndarray]],
             owns: Callable[[int, int], bool], fresh: np.ndarray, cause: str) -> list[Link]:
    """Record that `docno` holds the keys of `rows`; return the links for every document
    concerned, d included. A LINK goes only to the document that keeps the pair
    (`owns(target, partner)`, engine.partials): the other side has no use for it, and
    earlier holders' rows (`rows_of_holders`, one batched read) are read only for the
    pairs `docno` keeps. `fresh`: the batch's fresh keys (prefetch)."""
    keys = sorted_unique(rows[:, 0])
    first = member(keys, fresh)
    txn.partials.put_many(posting_keys(keys[first]), _encode_posting((docno,)))
    keys = keys[~first]
    names = posting_keys(keys)
    raws = txn.partials.get_many(names)
    pairs: dict[int, list[int]] = {}  # holder -> keys it shares with docno
    common: dict[int, list[int]] = {}  # holder -> keys that went common
    fresh = []  # most keys: docno is their first holder
    for key, name, raw in zip(keys.tolist(), names, raws, strict=True):
        if raw is None:
            fresh.append(name)
            continue
        holders = _decode_posting(raw)
        if not holders:
            continue
        elif len(holders) < m:
            txn.partials.put(name, _encode_posting((*holders, docno)))
            for y in holders:
                pairs.setdefault(y, []).append(key)
        else:
            txn.partials.put(name, COMMON_MARK)
            for y in holders:
                common.setdefault(y, []).append(key)
    txn.partials.put_many(fresh, _encode_posting((docno,)))
    mine = rows_of_holders([y for y in pairs if owns(docno, y)])
    out = []
    for y, ks in pairs.items():
        if y in mine:
            out.append(Link(docno, LINK, y, _select(mine[y], ks), cause))
        elif owns(y, docno):
            out.append(Link(y, LINK, docno, _select(rows, ks), cause))
    out.extend(Link(y, COMMON, 0, keys_rows(ks), cause) for y, ks in common.items())
    return out


def withdraw_keys(txn, docno: int, rows: np.ndarray, cause: str) -> list[Link]:
    """Take version `docno` (its rows) out of its keys' postings; links for the holders
    left."""
    keys = sorted_unique(rows[:, 0])
    names = posting_keys(keys)
    left: dict[int, list[int]] = {}
    for key, name, raw in zip(keys.tolist(), names, txn.partials.get_many(names), strict=True):
        holders = _decode_posting(raw)
        if not holders or docno not in holders:
            continue
        rest = tuple(y for y in holders if y != docno)
        txn.partials.put(name, _encode_posting(rest))
        for y in rest:
            left.setdefault(y, []).append(key)
    return [Link(y, UNLINK, docno, keys_rows(ks), cause) for y, ks in left.items()]
