"""A shard's step: process a batch, commit it with its outbox, then send; send again after
a restart; rebuild from the input partitions.

A shard (engine.shards: doc shard or gram shard) turns a batch of its input into state
changes and outgoing records. The records are the batch's *outbox*: committed in the
same write as the state changes and the input offsets, under a meta key of their own,
and only then sent; cleared once every record is acknowledged. A shard opened with
outboxes left (a crash between a commit and the acknowledgement of its records) sends
them again, oldest first, before anything else. So whatever a crash interrupts, nothing
the state holds is lost and nothing it does not hold was sent: at worst a batch is
processed twice or a record sent twice, which the shards absorb (docs/kafka-protocol.md,
"Outbox: commit, then send" and "At-least-once, idempotent").

Pure: no sockets, files, clocks or threads. The Kafka worker (adapters.worker) and the
tests' in-memory pipeline (loadtest/sharded.py) run their shards through this module and
only do the sending, so the simulation checks the protocol the worker runs.

    step = process_docs(state, role, pages, deltas, ends)  # or process_grams
    outbox = step.commit(at)          # state, offsets and outbox in one write
    send outbox.first(), then outbox.events() once the first are acknowledged
    state.clear(outbox)               # once every record is acknowledged: deleted with
                                      # the next commit, or by state.flush_cleared()
    on opening: state.outboxes()      # left by a crash: send them again, oldest first

A doc shard's new owner (`take_over`) compares its events with what consumers were shown
until it has redone its last owner's rounds, and sends again the events that owner
recorded but may not have sent; a restart on its own disk before that is done reads what
was shown again (`resume_catch_up`): docs/kafka-protocol.md, "Taking over". The opening
sequence that calls these (claim, send again, replay, take over) is engine.shard_opening.
"""

from __future__ import annotations

import json
from collections import ChainMap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .clusters import reconcile_shown
from .messages import DeltasMsg, GramsMsg, PageMsg, ShownMsg, pack_outbox, unpack_outbox
from .pair_records import PairRecords
from .partials import reconcile_pairs
from .shards import (
    DocShard,
    GramShard,
    last_shown,
    sent_examples,
    shown_record,
    unsent_events,
)
from .spam_labels import Examples
from .transaction import Transaction


class MetaKV(Protocol):
    """The key-value calls a shard step makes itself (state.kv.KV implements them): its
    meta writes outside a transaction, and scans of its outboxes and held inputs."""

    def write(self, ops: Iterable[tuple[str, bytes, bytes | None]]) -> None: ...
    def items(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]: ...


class ShardStore(Protocol):
    """What a shard step needs of its shard's store (state.txn.Store implements it): the
    engine names the store by what it does, and the state depends on the engine, never
    the other way."""

    kv: MetaKV

    def begin(self) -> ShardTxn: ...
    def positions(self) -> dict[str, int]: ...
    def meta(self, name: str) -> str | None: ...
    def compact(self) -> int: ...
    def segments_whole(self) -> bool: ...


class ShardTxn(Transaction, Protocol):
    """A transaction as a shard step commits it: the roles' calls, meta values and the
    input positions written with the rest in one write (state.txn.Txn implements it)."""

    def put_meta(self, name: str, value: bytes | None) -> None: ...
    def commit(self, positions: dict[str, int] | None = None) -> None: ...


Record = tuple[int, int, bytes]  # an outgoing record: (topic code, partition, value)
GRAMS_OUT, EVENTS_OUT, DELTAS_OUT, SHOWN_OUT = 0, 1, 2, 3  # topic codes, stored in outboxes
OUTBOX = b"outbox/"  # meta keys of the outboxes not cleared yet; they sort in commit order
EPOCH_SHIFT = 40  # event seq = epoch << EPOCH_SHIFT + offsets consumed (< 2**40)


@dataclass(frozen=True)
class Outbox:
    """The records one commit staged, under its meta key."""

    key: bytes
    records: list[Record]

    def first(self) -> list[Record]:
        """What may leave at once: every record but the events (a doc shard's withdrawals
        and the record of what its events show)."""
        return [r for r in self.records if r[0] != EVENTS_OUT]

    def events(self) -> list[Record]:
        """The events, to send only once the record of what they show (ShownMsg) is
        acknowledged: whatever a crash interrupts, no event is out that a new owner
        cannot know of (engine.shards.unsent_events)."""
        return [r for r in self.records if r[0] == EVENTS_OUT]


class ShardState:
    """A shard's Store and what its step keeps beside it: the input offsets it has
    applied, its live documents (doc shards), the epoch of the owner that wrote it, its
    outboxes, and while a new owner catches up, what consumers were shown."""

    def __init__(self, store: ShardStore) -> None:
        self.store = store
        self.offsets: dict[str, int] = store.positions()
        self.documents = int(store.meta("documents") or 0)
        self.epoch = int(store.meta("epoch") or 0)
        # A doc shard's new owner compares its results with what consumers were shown
        # (`shown`, URL -> events.shown_state) until its offsets reach `catch_up` (its
        # partitions' ends when it took over; kept in the state, so that a restart on
        # this disk before then reads `shown` again: resume_catch_up).
        self.catch_up: dict[str, int] = json.loads(store.meta("catch_up") or "{}")
        # A new owner's take-over (replay, then take_over) not committed yet: an opening
        # cut short by a rebalance, or by a crash, takes over again on this disk.
        self.taking_over = store.meta("taking_over") == "1"
        self.shown: dict[str, str] | None = None
        # while catching up, the examples its deltas partition holds (shards.sent_examples)
        self.sent: dict[tuple[int, int], Examples] = {}
        self.cleared: list[bytes] = []  # outboxes acknowledged, their keys not deleted yet

    def offset(self, name: str) -> int:
        return self.offsets.get(name, 0)

    def set_epoch(self, epoch: int, taking_over: bool = False) -> None:
        """The owner's epoch and whether it takes over from another owner, in one write
        (`taking_over` stays until take_over commits)."""
        self.store.kv.write([("meta", b"epoch", str(epoch).encode()),
                             ("meta", b"taking_over", b"1" if taking_over else None)])
        self.epoch, self.taking_over = epoch, taking_over

    def is_empty(self) -> bool:
        return not self.offsets and not self.outboxes()

    def whole(self) -> bool:
        """Whether the state has every part of its gram index (a segment's file, its
        pairs' only copy, may have been deleted or cut short on this disk)."""
        return self.store.segments_whole()

    def caught_up(self, offsets: dict[str, int] | None = None) -> bool:
        """Whether the offsets (or `offsets`, a batch's ends) have reached the ends a new
        owner noted when it took over."""
        at = self.offsets if offsets is None else offsets
        return all(at.get(n, 0) >= end for n, end in self.catch_up.items())

    def needs_shown(self) -> bool:
        """Restarted on this disk while catching up: what consumers were shown must be
        read again (resume_catch_up) before the next batch."""
        return self.shown is None and not self.caught_up()

    def catching_up(self) -> dict[str, str] | None:
        """What consumers were shown, while a new owner redoes its last owner's rounds."""
        if self.shown is not None and self.caught_up():
            self.shown, self.sent = None, {}
        return self.shown

    def commit(self, txn: ShardTxn, offsets: dict[str, int], records: Sequence[Record] = (),
               new_documents: int = 0) -> Outbox | None:
        """State, offsets and the records to send (the outbox) in one write; the outbox,
        None when there is nothing to send. Its key is made of the offsets, which only
        grow, so keys sort in commit order."""
        outbox = None
        for key in self.cleared:
            txn.put_meta(key.decode(), None)
        if records:
            outbox = Outbox(OUTBOX + b"%020d" % sum(offsets.values()), list(records))
            txn.put_meta(outbox.key.decode(), pack_outbox(outbox.records))
        if new_documents:
            txn.put_meta("documents", str(self.documents + new_documents).encode())
        txn.commit(offsets)
        self.cleared = []
        self.offsets = dict(offsets)
        self.documents += new_documents
        self.store.compact()
        return outbox

    def outboxes(self) -> list[Outbox]:
        """Outboxes not cleared yet, oldest first."""
        out, cleared = [], set(self.cleared)
        for key, raw in self.store.kv.items("meta", OUTBOX):
            if not key.startswith(OUTBOX):
                break
            if key not in cleared:
                out.append(Outbox(key, unpack_outbox(raw)))
        return out

    def held(self) -> int:
        """Inputs held for later: a doc shard's deltas about pages it has not applied
        yet, a gram shard's adds waiting for an older version's withdrawal. An idle
        pipeline holds none: one left means the input it waits for was lost."""
        return sum(1 for _ in self.store.kv.items("early"))

    def clear(self, outbox: Outbox) -> None:
        """Forget an outbox whose records are all acknowledged. Its key is deleted with
        the shard's next commit (or by `flush_cleared`), not by a write of its own,
        which would cost a stream of small rounds a RocksDB write per shard and round. Until
        then a restart sends it again, as it does an outbox whose acknowledgement a crash
        interrupted; the shards absorb records sent twice (docs/kafka-protocol.md)."""
        self.cleared.append(outbox.key)

    def flush_cleared(self) -> None:
        """Delete the keys of the acknowledged outboxes now (an idle shard, or one about
        to close: no commit will come to carry them)."""
        if self.cleared:
            self.store.kv.write([("meta", key, None) for key in self.cleared])
            self.cleared = []


@dataclass
class Step:
    """A batch processed on a shard's transaction, not committed yet. Dropping it is a
    crash before the commit: the state, its offsets and what consumers were shown stay
    as they were, and the batch is processed again."""

    state: ShardState
    txn: ShardTxn
    ends: dict[str, int]  # the input offsets after the batch
    records: list[Record]  # known once processed: a gram shard's deltas, withdrawals
    events: list[dict] = field(default_factory=list)
    shard: int = 0  # a doc shard's index: its ShownMsg goes to its own deltas partition
    new_documents: int = 0
    shown: dict[str, str] | None = None  # what consumers were shown that the batch changed

    def commit(self, at: str | None = None) -> Outbox | None:
        """State, offsets and outbox in one write; the outbox to send (None: nothing).
        `at` stamps the events: the adapter's clock, the engine has none."""
        outbox = self.state.commit(self.txn, self.ends, self.records + self._stamped(at),
                                   self.new_documents)
        if self.shown:
            self.state.shown.update(self.shown)
        return outbox

    def _stamped(self, at: str | None) -> list[Record]:
        """The record of what the events show (sent first), then the events."""
        sent = []
        for ev in self.events:
            ev["at"] = at
            sent.append(json.dumps(ev, ensure_ascii=False).encode())
        if (marker := shown_record(self.events, sent)) is None:
            return []
        return [(SHOWN_OUT, self.shard, marker)] + [(EVENTS_OUT, 0, raw) for raw in sent]


def process_grams(state: ShardState, role: GramShard, msgs: list[GramsMsg],
                  end: int) -> Step:
    """A gram shard's batch, its grams partition read up to offset `end`: the deltas for
    the doc shards to send."""
    txn = state.store.begin()
    records = [(DELTAS_OUT, s, raw) for s, raw in role.process(txn, msgs, end)]
    return Step(state, txn, {"grams": end}, records)


def round_seq(epoch: int, offsets: dict[str, int]) -> int:
    """The seq of a doc shard's round that consumed up to `offsets`: its events' seq and
    its pair records' stamp, above every earlier owner's (a lower epoch)."""
    return (epoch << EPOCH_SHIFT) + sum(offsets.values())


def process_docs(state: ShardState, role: DocShard, pages: Iterable[tuple[int, PageMsg]],
                 deltas: Iterable[DeltasMsg | ShownMsg], ends: dict[str, int]) -> Step:
    """A doc shard's batch, its pages (with their offsets) then its deltas, the partitions
    read up to `ends`: withdrawals and events to send. The events' seq grows with the
    offsets and ranks this owner's events above every earlier owner's (its epoch);
    while a new owner catches up, events compare with what consumers were shown, and the
    changes to that apply on commit; the batch that ends the catch-up also corrects the
    site statuses consumers hold (DocShard.end_catch_up)."""
    seq = round_seq(state.epoch, ends)
    base = state.catching_up()
    shown = None if base is None else ChainMap({}, base)  # writes go to a map of their own
    txn = state.store.begin()
    out, events = role.process(txn, pages, deltas, seq, shown, ends["docs"],
                               state.sent if shown is not None else None)
    if shown is not None and state.caught_up(ends):
        events += role.end_catch_up(txn, seq, shown)
    records = [(GRAMS_OUT, g, raw) for g, raw in out]
    records += [(DELTAS_OUT, shard, raw) for shard, raw in role.site_parts]
    return Step(state, txn, dict(ends), records, events, role.shard, role.documents_added,
                None if shown is None else shown.maps[0])


def replay_grams(state: ShardState, role: GramShard, msgs: list[GramsMsg], end: int) -> None:
    """Rebuilding a gram shard from its partition: a batch committed with no outbox, as
    whoever committed the group's offsets up to here sent what it makes."""
    txn = state.store.begin()
    role.process(txn, msgs, end)
    state.commit(txn, {"grams": end})


def replay_docs(state: ShardState, role: DocShard, pages: Iterable[tuple[int, PageMsg]],
                deltas: Iterable[DeltasMsg | ShownMsg], ends: dict[str, int]) -> None:
    """Rebuilding a doc shard from its partitions: a batch committed with no outbox (its
    events and withdrawals were sent by whoever committed the group's offsets), each
    URL's seq counted on from its last one."""
    txn = state.store.begin()
    role.process(txn, pages, deltas, 0, docs_applied=ends["docs"])
    state.commit(txn, ends, new_documents=role.documents_added)


def take_over(state: ShardState, records: Iterable[tuple[int, bytes]], committed: int,
              ends: dict[str, int], shard: int = 0, shards: int = 1) -> Outbox | None:
    """A doc shard's new owner, its state replayed up to the group's committed offsets:
    `records` are its deltas partition's (offset, value) pairs from the start to `ends`
    (where its partitions end now; the ShownMsg records among them count), `committed`
    the group's deltas offset. Until the offsets reach `ends` events compare with what
    consumers were shown; the events recorded past `committed` go out again, as their
    owner may have died before sending them, and so do the pair records of the URLs
    whose record of what they showed it reconciled, to the other doc shards (`shard` of
    `shards`). Returns that outbox, committed with the ends, so a restart sends it again
    and knows it is catching up."""
    records = list(records)
    state.shown = last_shown(records)
    state.sent = sent_examples(records)
    state.catch_up = dict(ends)
    txn = state.store.begin()
    txn.put_meta("catch_up", json.dumps(ends, sort_keys=True).encode())
    txn.put_meta("taking_over", None)
    reconcile_shown(txn, state.shown)
    owned = reconcile_pairs(txn, state.shown)
    again = _pair_records(owned, round_seq(state.epoch, state.offsets), shard, shards)
    again += [(EVENTS_OUT, 0, raw) for raw in unsent_events(records, committed)]
    outbox = state.commit(txn, state.offsets, again)
    state.taking_over = False
    return outbox


def _pair_records(owned: dict[str, list[str]], stamp: int, shard: int, shards: int
                  ) -> list[Record]:
    """Pair records (engine.pair_records) of these URLs, to every doc shard but `shard`."""
    if not owned:
        return []
    raw = DeltasMsg([], pairs=PairRecords(stamp, owned)).encode()
    return [(DELTAS_OUT, s, raw) for s in range(shards) if s != shard]


def resume_catch_up(state: ShardState, records: Iterable[tuple[int, bytes]]) -> None:
    """A doc shard restarted on its own disk before it had caught up (needs_shown), its
    outboxes sent: what consumers were shown, read again from its deltas partition's
    (offset, value) pairs from the start to the end. Its own events since the takeover
    are there too, each recorded before it left; so are the examples it sent."""
    records = list(records)
    state.shown = last_shown(records)
    state.sent = sent_examples(records)
