"""The shard step (engine.shard_step): the outbox is committed with the state before
anything can be sent, comes back after a crash until it is cleared, and a batch dropped
before its commit leaves no trace. The Kafka worker and loadtest/sharded.py both run it."""

from __future__ import annotations

import json

from loadtest.sharded import analysed
from streamdet.engine.messages import DeltasMsg, GramsMsg, PageMsg, ShownMsg, unpack
from streamdet.engine.pair_index import partners_of
from streamdet.engine.pair_records import PairRecords
from streamdet.engine.params import Params
from streamdet.engine.partials import pair_slot
from streamdet.engine.routing import docno_for
from streamdet.engine.shard_step import (
    DELTAS_OUT,
    EPOCH_SHIFT,
    EVENTS_OUT,
    SHOWN_OUT,
    ShardState,
    process_docs,
    process_grams,
    replay_docs,
    replay_grams,
    resume_catch_up,
    take_over,
)
from streamdet.engine.shards import DocShard, GramShard, page_adds
from streamdet.engine.site_shard import SITE_SHARD
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import Store

PARAMS = Params(k=2, m=5, c=1, theta=0.0, foreign="domain")
WORDS = "one two three four five six seven eight"


def _pages() -> list[tuple[int, PageMsg]]:
    """Three pages that copy one another (b and c copy a): all quilted."""
    pages = analysed([{"url": f"http://{name}.example/", "text": WORDS + more}
                      for name, more in (("a", ""), ("b", " nine"), ("c", " ten"))], PARAMS)
    return [(o, PageMsg(p.url, p.server, p.grams, None)) for o, p in enumerate(pages)]


def _adds() -> list[GramsMsg]:
    return [GramsMsg.decode(raw) for o, m in _pages()
            for _g, raw in page_adds(m, docno_for(o, 0, 1), 1)]


def _deltas() -> list[DeltasMsg]:
    """The deltas a gram shard sends for the two pages' adds."""
    txn = Store(MemoryKV()).begin()
    return [DeltasMsg.decode(raw) for _s, raw in GramShard(PARAMS, 0, 1).process(txn, _adds())]


def _restarted(state: ShardState) -> ShardState:
    """The same shard opened again on what its store holds (a restart after a crash)."""
    return ShardState(Store(state.store.kv))


def test_a_gram_step_commits_its_outbox_with_its_state_before_it_can_be_sent():
    state = ShardState(Store(MemoryKV()))
    step = process_grams(state, GramShard(PARAMS, 0, 1), _adds(), 3)
    assert step.records and {code for code, _p, _v in step.records} == {DELTAS_OUT}
    after_crash = _restarted(state)  # processed, not committed: nothing to send, nothing applied
    assert after_crash.outboxes() == [] and after_crash.offsets == {}

    outbox = step.commit()
    assert outbox is not None and outbox.records == step.records
    reopened = _restarted(state)  # a crash between the commit and the sends
    assert reopened.outboxes() == [outbox]  # everything to send is in the store
    assert reopened.offsets == {"grams": 3}
    state.clear(outbox)  # acknowledged: not sent again by this owner
    assert state.outboxes() == []
    assert _restarted(state).outboxes() == [outbox]  # a crash now sends it again
    state.flush_cleared()
    assert _restarted(state).outboxes() == [] and state.cleared == []


def test_an_acknowledged_outbox_goes_with_the_next_commit_not_a_write_of_its_own():
    state = ShardState(Store(MemoryKV()))
    adds = _adds()
    role = GramShard(PARAMS, 0, 1)
    first = process_grams(state, role, adds[:2], 2).commit()
    assert first is not None
    state.clear(first)
    writes = []
    real_write = state.store.kv.write
    state.store.kv.write = lambda ops: writes.append(list(ops)) or real_write(writes[-1])
    second = process_grams(state, role, adds[2:], 3).commit()
    assert second is not None and len(writes) == 1  # one write: state, new outbox, delete
    assert ("meta", first.key, None) in writes[0]
    assert _restarted(state).outboxes() == [second] and state.cleared == []


def test_outboxes_left_by_a_crash_come_back_oldest_first_until_cleared():
    """Pipelined rounds: several outboxes committed, none acknowledged yet."""
    state = ShardState(Store(MemoryKV()))
    adds = _adds()
    role = GramShard(PARAMS, 0, 1)
    first = process_grams(state, role, adds[:2], 2).commit()
    second = process_grams(state, role, adds[2:], 3).commit()
    assert first is not None and second is not None
    reopened = _restarted(state)
    assert reopened.outboxes() == [first, second]
    reopened.clear(first)
    assert reopened.outboxes() == [second]
    reopened.flush_cleared()
    assert _restarted(state).outboxes() == [second]
    assert not reopened.is_empty()


def test_a_batch_with_nothing_to_send_commits_no_outbox():
    state = ShardState(Store(MemoryKV()))
    lone = [m for m in _adds() if m.url == "http://a.example/"]  # a page alone: no deltas
    assert process_grams(state, GramShard(PARAMS, 0, 1), lone, 1).commit() is None
    assert state.outboxes() == [] and state.offsets == {"grams": 1}


def test_a_doc_step_sends_what_its_events_show_then_the_events():
    state = ShardState(Store(MemoryKV()))
    state.set_epoch(3)
    ends = {"docs": 3, "deltas": 1}
    step = process_docs(state, DocShard(PARAMS, 0, 1), _pages(), _deltas(), ends)
    outbox = step.commit("2026-01-02T03:04:05Z")
    assert outbox is not None and _restarted(state).outboxes() == [outbox]
    assert {e["url"] for e in step.events if e["event"] == "quilt"} == {
        f"http://{name}.example/" for name in "abc"}
    assert all(e["at"] == "2026-01-02T03:04:05Z" for e in step.events)
    assert all(e["seq"] == (3 << EPOCH_SHIFT) + 4 for e in step.events)  # epoch, offsets
    [parts, (code, partition, raw)] = outbox.first()
    assert (code, partition) == (SHOWN_OUT, 0)
    events = outbox.events()
    assert {c for c, _p, _v in events} == {EVENTS_OUT}
    assert outbox.records == [parts, (code, partition, raw), *events]
    # the parts of its documents go to the site shard (SPEC §8, engine.site_shard)
    assert parts[:2] == (DELTAS_OUT, SITE_SHARD)
    assert {p.url for p in DeltasMsg.decode(parts[2]).parts} == {
        f"http://{name}.example/" for name in "abc"}
    msg = ShownMsg.from_parts(*unpack(raw))
    assert {url: seq for url, (seq, _digest) in msg.shown.items()} == {
        e["url"]: e["seq"] for e in step.events}
    # the record carries the events byte for byte: a new owner can send them again
    assert [text.encode() for text in msg.events] == [v for _c, _p, v in events]
    assert [json.loads(v) for _c, _p, v in events] == step.events
    assert state.offsets == ends and state.documents == 3


def test_what_consumers_were_shown_changes_only_when_the_batch_commits():
    """A new owner catching up compares with what consumers were shown; a batch that
    crashes before its commit must leave that as it was."""
    state = ShardState(Store(MemoryKV()))
    take_over(state, [], 0, {"docs": 10, "deltas": 10})
    state.shown["http://x.example/"] = ""
    role = DocShard(PARAMS, 0, 1)
    process_docs(state, role, _pages(), _deltas(), {"docs": 3, "deltas": 1})  # dropped
    assert state.shown == {"http://x.example/": ""}
    step = process_docs(state, role, _pages(), _deltas(), {"docs": 3, "deltas": 1})
    step.commit("t")
    assert set(state.shown) == {"http://x.example/"} | {e["url"] for e in step.events}


def test_replays_commit_their_offsets_and_nothing_to_send():
    """Rebuilding from the partitions sends nothing: whoever committed the group's
    offsets sent it all."""
    grams = ShardState(Store(MemoryKV()))
    replay_grams(grams, GramShard(PARAMS, 0, 1), _adds(), 3)
    assert grams.offsets == {"grams": 3} and grams.outboxes() == []
    docs = ShardState(Store(MemoryKV()))
    role = DocShard(PARAMS, 0, 1)
    replay_docs(docs, role, _pages(), [], {"docs": 3, "deltas": 0})
    replay_docs(docs, role, [], _deltas(), {"docs": 3, "deltas": 1})
    assert docs.offsets == {"docs": 3, "deltas": 1} and docs.outboxes() == []
    assert _restarted(docs).documents == 3


def _shown_partition(state: ShardState, at: str) -> tuple[list[tuple[int, bytes]], list[dict]]:
    """A doc shard's round committed and its ShownMsg on the deltas partition (after the
    gram shard's one deltas record), its events never sent: the owner died in between."""
    step = process_docs(state, DocShard(PARAMS, 0, 1), _pages(), _deltas(),
                        {"docs": 3, "deltas": 1})
    outbox = step.commit(at)
    [shown] = [v for c, _p, v in outbox.first() if c == SHOWN_OUT]
    return [(0, _deltas()[0].encode()), (1, shown)], step.events


def test_a_new_owner_sends_again_the_events_recorded_after_the_commit():
    """The owner died with its ShownMsg acknowledged and its events not sent, its disk
    lost: the new owner's takeover sends those events, byte for byte, before anything."""
    lost = ShardState(Store(MemoryKV()))
    partition, events = _shown_partition(lost, "2026-01-02T03:04:05Z")
    new = ShardState(Store(MemoryKV()))
    outbox = take_over(new, partition, 0, {"docs": 3, "deltas": 2})
    assert outbox is not None and outbox.first() == []
    assert [json.loads(v) for _c, _p, v in outbox.events()] == sorted(
        events, key=lambda e: e["seq"])
    assert _restarted(new).outboxes() == [outbox]  # committed: a crash sends it again
    assert set(new.shown) == {e["url"] for e in events}
    # past the group's commit only: a record the group's offsets cover was read by a
    # committed round, which follows its events' acknowledgement
    assert take_over(ShardState(Store(MemoryKV())), partition, 2,
                     {"docs": 3, "deltas": 2}) is None


def test_a_new_owner_sends_the_pair_records_of_the_urls_it_reconciled():
    """What consumers were shown holds a pair the replayed state lacks (its last owner
    reported it past the group's commit): the new owner's record and its own copy take
    the pair, and its take-over tells every other doc shard the URL's owned partners,
    stamped above every earlier owner's records, whatever those copies received."""
    a, b = "http://a.example/", "http://b.example/"
    shown = ShownMsg({pair_slot(a, b): [(2 << EPOCH_SHIFT) + 5, "d1"]}).encode()
    state = ShardState(Store(MemoryKV()))
    state.set_epoch(3, taking_over=True)
    outbox = take_over(state, [(0, shown)], 0, {"docs": 0, "deltas": 1}, shard=1, shards=3)
    assert outbox is not None and outbox.events() == []
    assert [(c, p) for c, p, _v in outbox.first()] == [(DELTAS_OUT, 0), (DELTAS_OUT, 2)]
    told = [DeltasMsg.decode(v).pairs for _c, _p, v in outbox.first()]
    assert told == [PairRecords(3 << EPOCH_SHIFT, {a: [b]})] * 2
    assert partners_of(state.store.begin().partials, [a, b]) == [[b], [a]]


def test_a_restart_on_its_own_disk_while_catching_up_reads_what_was_shown_again():
    """The comparison a new owner makes lives in memory; the ends it compares up to are
    in the state, so a restart knows it must read what was shown again before it goes
    on, and forgets nothing once past them."""
    partition, events = _shown_partition(ShardState(Store(MemoryKV())), "t")
    state = ShardState(Store(MemoryKV()))
    take_over(state, partition, 2, {"docs": 3, "deltas": 2})
    assert state.catching_up() is not None and not state.needs_shown()
    again = _restarted(state)
    assert again.catch_up == {"docs": 3, "deltas": 2} and again.needs_shown()
    resume_catch_up(again, partition)
    assert again.catching_up() == state.shown and not again.needs_shown()
    replay_docs(again, DocShard(PARAMS, 0, 1), _pages(), [], {"docs": 3, "deltas": 2})
    assert again.catching_up() is None  # past the ends: compares with its own results
    assert not _restarted(again).needs_shown()


def test_a_take_over_is_kept_in_the_state_until_it_commits():
    """A new owner's opening may be cut short (a rebalance, a crash) between its claim
    and its take-over: the state says it is taking over until take_over commits, so the
    next opening on this disk takes over too, under the same owner's next epoch."""
    partition, _ = _shown_partition(ShardState(Store(MemoryKV())), "t")
    state = ShardState(Store(MemoryKV()))
    state.set_epoch(4, taking_over=True)
    again = _restarted(state)
    assert (again.epoch, again.taking_over) == (4, True)
    again.set_epoch(5, taking_over=again.taking_over)
    take_over(again, partition, 2, {"docs": 3, "deltas": 2})
    assert not again.taking_over
    assert (_restarted(again).epoch, _restarted(again).taking_over) == (5, False)
    state.set_epoch(6)  # an owner going on with its own history
    assert not _restarted(state).taking_over
