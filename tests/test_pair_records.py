"""Pair records (engine.pair_records): each URL's owned partners, absolute and stamped,
kept by every doc shard's copies of the partners from both sides (engine.score_replica),
and the pair moves of pipeline format shards-9, still read."""

from __future__ import annotations

from streamdet.engine.messages import DeltasMsg
from streamdet.engine.pair_index import decode_index
from streamdet.engine.pair_records import PairRecords, newest, owned_partners
from streamdet.engine.score_replica import keep_pairs
from streamdet.engine.site_shard import SitePart
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

A, B, C, D = "http://a.example/", "http://b.example/", "http://c.example/", "http://ä.example/"


def _copies(txn) -> dict[str, list[str]]:
    """The partners from both sides the copy holds, per URL."""
    return {key[1:].decode("utf-8"): decode_index(raw)
            for key, raw in txn.partials.scan(b"r", b"s")}


def test_records_round_trip_in_a_deltas_message():
    rec = PairRecords(7 << 40 | 12, {A: [B, D], C: []})
    m = DeltasMsg.decode(DeltasMsg([], pairs=rec).encode())
    assert m.pairs == rec and m.moves == []
    assert DeltasMsg.decode(DeltasMsg([]).encode()).pairs is None


def test_a_url_owns_the_pairs_with_the_urls_after_it():
    assert owned_partners(B, [D, A, C]) == [C, D]
    assert newest([PairRecords(5, {A: [B]}), PairRecords(3, {A: [], C: [D]}),
                   PairRecords(5, {A: [C]})]) == {A: (5, [C]), C: (3, [D])}


def test_a_record_replaces_what_a_copy_holds_on_both_sides():
    """A copy holding pairs an owner moved and never recorded (a dead owner's sends) is
    overwritten by the URL's next record: its stale pairs leave both pages' partners, the
    pairs owned by the pages' other partners stay."""
    txn = Store(MemoryKV()).begin()
    keep_pairs(txn, [], [PairRecords(1, {A: [B, C]}), PairRecords(2, {B: [D]})])
    assert _copies(txn) == {A: [B, C], B: [A, D], C: [A], D: [B]}
    keep_pairs(txn, [], [PairRecords(9 << 40, {A: [C, D]})])
    assert _copies(txn) == {A: [C, D], B: [D], C: [A], D: [A, B]}


def test_an_older_record_than_kept_is_passed_over():
    """A record of an owner the pipeline replaced (a lower epoch), or sent again, arrives
    after a newer one: it changes nothing."""
    txn = Store(MemoryKV()).begin()
    keep_pairs(txn, [], [PairRecords(9 << 40, {A: [B]})])
    keep_pairs(txn, [], [PairRecords(8 << 40, {A: [C]}), PairRecords(9 << 40, {A: [B]})])
    assert _copies(txn) == {A: [B], B: [A]}
    keep_pairs(txn, [], [PairRecords(9 << 40 | 1, {A: []})])
    assert _copies(txn) == {}


# a deltas message of pipeline format shards-9 (messages version 3): a part and pair moves
# (url, other, paired), two pairs' both sides
_SHARDS_9_MOVES = bytes.fromhex(
    "330100007b226b223a2264656c746173222c226e223a5b5d2c2269223a5b5d2c2275223a5b22687474703a"
    "2f2f612e6578616d706c652f225d2c226d223a5b5b22687474703a2f2f612e6578616d706c652f222c2268"
    "7474703a2f2fc3a42e6578616d706c652f222c315d2c5b22687474703a2f2fc3a42e6578616d706c652f22"
    "2c22687474703a2f2f612e6578616d706c652f222c315d2c5b22687474703a2f2f612e6578616d706c652f"
    "222c22687474703a2f2f622e6578616d706c652f222c305d2c5b22687474703a2f2f622e6578616d706c65"
    "2f222c22687474703a2f2f612e6578616d706c652f222c305d5d2c2263223a5b22687474703a2f2f612e65"
    "78616d706c652f225d2c2274223a5b6e756c6c5d2c2276223a332c2261223a5b302c302c302c302c302c30"
    "2c302c302c372c305d7d0900000000000000460000000000000003000000000000000a0000000000000001"
    "0000000000000000000000000000000000000000000000")


def test_pair_moves_written_before_still_apply():
    """A shards-9 deltas message in a partition a rebuild replays: its moves apply to the
    copy as they did, and a later record of the URL replaces what they made."""
    m = DeltasMsg.decode(_SHARDS_9_MOVES)
    assert m.parts == [SitePart(9, 70, A, 3, 10, True, A)] and m.pairs is None
    assert m.moves == [(A, D, True), (D, A, True), (A, B, False), (B, A, False)]
    txn = Store(MemoryKV()).begin()
    keep_pairs(txn, [(A, B, True), (B, A, True)], [])
    keep_pairs(txn, m.moves, [])
    assert _copies(txn) == {A: [D], D: [A]}
    keep_pairs(txn, [], [PairRecords(1, {A: [B]})])
    assert _copies(txn) == {A: [B], B: [A]}
