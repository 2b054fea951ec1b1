"""The labelled set L of paragraph chunks and each document's contains(L, f) (SPEC §8,
after Ardi & Heidemann).

L holds the chunks on at least T live documents (blind discovery, `--chunk-threshold`;
T = 0 turns it off) and the chunks a user labels (informed discovery, `streamdet
label-chunks`); stop chunks never enter it (engine.chunks keeps none).
contains(L, f) = occurrences of f's chunks that are in L / occurrences of f's chunks.

A chunk's membership changes when its count crosses T or when it is labelled, and then
every live holder's numerator moves together, however many there are: so every holder
is known. `n<chunk>` in table `chunks` holds a chunk's count of live holders, whether a
user labelled it and, while it has had at most INLINE holders (most paragraphs are on
one page), the holders themselves; past that each holder has a key of its own,
`p<chunk><docno>` (RocksDB keeps them in order: the holders of a chunk are one prefix
scan, and a boilerplate paragraph on a million pages costs a million small keys, never a
record rewritten at each arrival). Beside them: `d<docno>` a document's chunks (to
withdraw it); `l<docno>` its occurrences in L (the numerator; absent: 0). All of it is
written in the role's own transaction, so a gram shard of a Kafka pipeline, which owns
the chunks that hash to it, counts each change exactly once; contains' figures are then
sums over the gram shards.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .chunks import Chunks
from .keyed import KeyedRecords, u64key, u64keys
from .sorting import sorted_unique

FIXED_ONE = 1 << 32  # contains(L, f) kept as floor(contains * 2^32), for neighbourhoods

INLINE = 4  # holders a chunk's record names itself; past that, one key each
_COUNT = struct.Struct("<QBB")  # live holders, labelled by a user, holders in keys
_HOLDER = struct.Struct("<QI")  # a holder named inline: docno, occurrences
_FIRST = struct.Struct("<QBBQI")  # the record of a chunk's first holder
_OCC = struct.Struct("<I")  # a holder key's value: its occurrences of the chunk


class ChunkView(Protocol):
    """What the labelled set needs from the state (implemented by state.txn.Txn)."""

    chunks: KeyedRecords


def doc_key(docno: int) -> bytes:
    return b"d" + u64key(docno)


def inside_key(docno: int) -> bytes:
    return b"l" + u64key(docno)


@dataclass
class Count:
    """A chunk's record: its live holders' count, whether a user labelled it, and its
    holders inline (docno -> occurrences) while it has had at most INLINE of them; past
    that (`spilled`), one key each."""

    count: int = 0
    labelled: bool = False
    spilled: bool = False
    inline: dict[int, int] = field(default_factory=dict)

    @classmethod
    def decode(cls, raw: bytes | None) -> Count:
        if raw is None:
            return cls()
        count, labelled, spilled = _COUNT.unpack_from(raw)
        pairs = _HOLDER.iter_unpack(raw[_COUNT.size :])
        return cls(count, bool(labelled), bool(spilled), dict(pairs))

    def encode(self) -> bytes | None:
        if not self.count and not self.labelled:
            return None
        return _COUNT.pack(self.count, self.labelled, self.spilled) + b"".join(
            _HOLDER.pack(d, n) for d, n in self.inline.items())


class LabelledSet:
    """Keeps chunk counts, holders and every document's occurrences in L current."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.moved: dict[int, str] = {}  # documents whose occurrences in L moved -> why

    def take_moved(self) -> dict[int, str]:
        """The documents whose occurrences in L moved since the last call, each with the
        URL whose arrival (or label) moved it last."""
        moved, self.moved = self.moved, {}
        return moved

    def _in(self, count: int, labelled: bool) -> bool:
        return labelled or (self.threshold > 0 and count >= self.threshold)

    @staticmethod
    def prefetch(txn: ChunkView, batch: list[Chunks]) -> None:
        """Read the counts of a batch's chunks in one batched read (one read a page cost
        more than the keys: ~3 reads a page, ~45 keys each); `add` then finds them read."""
        arrays = [chunks.keys for chunks in batch if len(chunks.keys)]
        if arrays:
            keys = sorted_unique(np.concatenate(arrays))  # sorted: RocksDB reads them in order
            txn.chunks.get_many([b"n" + k for k in u64keys(keys)])

    def add(self, txn: ChunkView, docno: int, chunks: Chunks, cause: str) -> None:
        """Version `docno` holds `chunks` (it arrived as URL `cause`)."""
        txn.chunks.put(doc_key(docno), chunks.encode())
        # a new version was in no chunk's holders, so it has no count of occurrences in
        # L yet: `_apply` need not read one (a read a page, most of a batch's reads)
        txn.chunks.absent([inside_key(docno)])
        moves: dict[int, int] = {}
        keys = u64keys(chunks.keys)
        names = [b"n" + k for k in keys]
        raws = txn.chunks.get_many(names)
        occs = chunks.counts.tolist()
        # most paragraphs are on one page: their first records are written together (one
        # page never makes L: T is not 1)
        first = [i for i, raw in enumerate(raws) if raw is None]
        txn.chunks.put_each([names[i] for i in first],
                       [_FIRST.pack(1, 0, 0, docno, occs[i]) for i in first])
        for key, occ, raw in zip(keys, occs, raws, strict=True):
            if raw is None:
                continue
            c = Count.decode(raw)
            if self._in(c.count + 1, c.labelled):
                if not self._in(c.count, c.labelled):
                    self._move_holders(txn, key, c, moves, 1)
                moves[docno] = moves.get(docno, 0) + occ
            c.count += 1
            if not c.spilled and c.count > INLINE:  # its holders move to keys of their own
                for d, n in c.inline.items():
                    txn.chunks.put(b"p" + key + u64key(d), _OCC.pack(n))
                c.spilled, c.inline = True, {}
            if c.spilled:
                txn.chunks.put(b"p" + key + u64key(docno), _OCC.pack(occ))
            else:
                c.inline[docno] = occ
            txn.chunks.put(b"n" + key, c.encode())
        self._apply(txn, moves, cause)

    def withdraw(self, txn: ChunkView, docno: int, cause: str) -> None:
        """Version `docno` is replaced (by URL `cause`): it leaves its chunks (none kept:
        nothing to do)."""
        raw = txn.chunks.get_many([doc_key(docno)])[0]
        if raw is None:
            return
        chunks = Chunks.decode(raw)
        moves: dict[int, int] = {}
        keys = u64keys(chunks.keys)
        for key, raw_n in zip(keys, txn.chunks.get_many([b"n" + k for k in keys]), strict=True):
            c = Count.decode(raw_n)
            if c.spilled:
                txn.chunks.put(b"p" + key + u64key(docno), None)
            else:
                c.inline.pop(docno, None)
            if self._in(c.count, c.labelled) and not self._in(c.count - 1, c.labelled):
                self._move_holders(txn, key, c, moves, -1)
            c.count -= 1
            if not c.count:
                c.spilled = False  # no holder key is left
            txn.chunks.put(b"n" + key, c.encode())
        txn.chunks.put(doc_key(docno), None)
        txn.chunks.put(inside_key(docno), None)
        self._apply(txn, moves, cause)

    def label(self, txn: ChunkView, keys: np.ndarray, cause: str) -> int:
        """A user labels chunks (informed discovery; `cause` names what was labelled):
        they join L for good. Returns how many were not labelled before."""
        fresh = 0
        moves: dict[int, int] = {}
        names = u64keys(sorted_unique(keys))
        for key, raw in zip(names, txn.chunks.get_many([b"n" + k for k in names]), strict=True):
            c = Count.decode(raw)
            if c.labelled:
                continue
            fresh += 1
            if not self._in(c.count, False):
                self._move_holders(txn, key, c, moves, 1)
            c.labelled = True
            txn.chunks.put(b"n" + key, c.encode())
        self._apply(txn, moves, cause)
        return fresh

    @staticmethod
    def _move_holders(txn: ChunkView, key: bytes, c: Count, moves: dict[int, int],
                      sign: int) -> None:
        """Every live holder of a chunk gains (sign 1) or loses its occurrences in L:
        those its record names, or those of its holder keys."""
        holders = c.inline.items() if not c.spilled else (
            (int.from_bytes(k[9:17], "big"), _OCC.unpack(raw)[0])
            for k, raw in txn.chunks.under(b"p" + key))
        for d, n in holders:
            moves[d] = moves.get(d, 0) + sign * n

    def _apply(self, txn: ChunkView, moves: dict[int, int], cause: str) -> None:
        targets = [d for d, n in moves.items() if n]
        if not targets:
            return
        self.moved.update(dict.fromkeys(targets, cause))
        raws = txn.chunks.get_many([inside_key(d) for d in targets])
        for d, raw in zip(targets, raws, strict=True):
            now = (int.from_bytes(raw, "little") if raw else 0) + moves[d]
            txn.chunks.put(inside_key(d), now.to_bytes(8, "little") if now else None)


def share(txn: ChunkView, docno: int) -> tuple[int, int] | None:
    """(occurrences in L, occurrences) of a document's chunks held here; None for a
    document that was never counted (from a state older than chunks)."""
    return shares(txn, [docno])[0]


def shares(txn: ChunkView, docnos: list[int]) -> list[tuple[int, int] | None]:
    """`share` of many documents in one batched read (a batch asks for every page's)."""
    raws = txn.chunks.get_many([k for d in docnos for k in (doc_key(d), inside_key(d))])
    return [None if doc is None else
            ((int.from_bytes(inside, "little") if inside else 0), Chunks.decode(doc).total())
            for doc, inside in zip(raws[::2], raws[1::2], strict=True)]


def doc_chunks(txn: ChunkView, docno: int) -> Chunks:
    """A document's chunks as counted here (none: not counted, or no chunks)."""
    return Chunks.decode(txn.chunks.get_many([doc_key(docno)])[0])


def contains_fixed(inside: int, total: int) -> int:
    """contains(L, f) in units of 2^-32, rounded down (0 when f has no chunk)."""
    return (inside * FIXED_ONE) // total if total else 0
