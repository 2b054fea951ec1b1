"""The worker's guards around a round (adapters.worker), without a broker: a fetch that
skips records past a shard state's offset is read again from the hole (applying it would
lose them) and fails the round only when the hole stays (adapters.contiguity), and
the `raise` failpoint the pipeline tests use to fail a round. The same paths with a real
broker and real workers: test_kafka_pipeline's rejoin tests."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import numpy as np
import pytest
from aiokafka import TopicPartition

from streamdet.adapters import failpoints
from streamdet.adapters.contiguity import Gaps, SkippedRecords
from streamdet.adapters.kafka import Timing
from streamdet.adapters.metrics import metrics
from streamdet.adapters.round_pacer import RoundPacer
from streamdet.adapters.worker import Shard, Worker
from streamdet.engine.params import Params
from streamdet.engine.shard_opening import claim
from streamdet.state import recent as recent_mod
from streamdet.state import segments as seg_mod


def _records(*offsets: int) -> list:
    return [SimpleNamespace(offset=o, value=b"") for o in offsets]


@pytest.fixture
def shard(tmp_path):
    """A gram shard's real state whose grams input is applied up to offset 10."""
    s = Shard("gram", 2, str(tmp_path / "gram-2"), Params(), 4)
    txn = s.store.begin()
    s.commit(txn, {"grams": 10})
    yield s
    s.close()


class _Seeks:
    """A consumer that notes where it was sent back to."""

    def __init__(self) -> None:
        self.seeks: list[tuple[object, int]] = []

    def seek(self, tp, offset: int) -> None:
        self.seeks.append((tp, offset))


def _unapplied_worker(patience_s: float = 45.0) -> Worker:
    worker = Worker("127.0.0.1:1", "unused", Params(), 4)
    worker.consumer = _Seeks()
    worker.gaps = Gaps(patience_s)
    return worker


def _gaps_counted() -> float:
    return metrics().fetch_gaps._value.get()


def test_records_already_applied_are_dropped_and_the_rest_must_follow_on(shard):
    worker = _unapplied_worker()
    assert [r.offset for r in worker._unapplied(shard, "grams", _records(8, 9, 10, 11))] \
        == [10, 11]
    assert worker._unapplied(shard, "grams", _records(7, 8, 9)) == []
    assert [r.offset for r in worker._unapplied(shard, "grams", _records(10))] == [10]
    assert worker._unapplied(shard, "grams", []) == []
    assert worker.consumer.seeks == []


def test_a_fetch_past_the_state_or_with_a_hole_is_read_again_from_the_hole(shard):
    """A broker may serve a later batch before an earlier one it counted (tansu under
    concurrent producers): the shard takes what follows on and the consumer goes back."""
    worker = _unapplied_worker()
    tp = TopicPartition(worker.topics.grams, 2)
    before = _gaps_counted()
    assert worker._unapplied(shard, "grams", _records(12, 13)) == []
    assert [r.offset for r in worker._unapplied(shard, "grams", _records(9, 10, 11, 14))] \
        == [10, 11]
    assert worker.consumer.seeks == [(tp, 10), (tp, 12)]
    assert _gaps_counted() == before + 2


def test_a_hole_that_stays_past_the_patience_fails_the_round(shard, monkeypatch):
    worker = _unapplied_worker(patience_s=30.0)
    now = [1000.0]
    monkeypatch.setattr("streamdet.adapters.worker.time.monotonic", lambda: now[0])
    worker._unapplied(shard, "grams", _records(12, 13))
    now[0] += 29.0
    worker._unapplied(shard, "grams", _records(11, 12))  # still 10 missing: patience
    now[0] += 2.0
    with pytest.raises(SkippedRecords, match=r"gram shard 2: grams: offset 10 has been "
                                             r"missing for 31 s"):
        worker._unapplied(shard, "grams", _records(12, 13))


def test_a_hole_filled_in_time_starts_the_patience_again(shard, monkeypatch):
    worker = _unapplied_worker(patience_s=30.0)
    now = [1000.0]
    monkeypatch.setattr("streamdet.adapters.worker.time.monotonic", lambda: now[0])
    worker._unapplied(shard, "grams", _records(12))
    now[0] += 20.0
    assert [r.offset for r in worker._unapplied(shard, "grams", _records(10, 11))] == [10, 11]
    now[0] += 20.0  # a hole at the same offset later is a new one
    assert worker._unapplied(shard, "grams", _records(12)) == []
    assert worker.gaps.since[TopicPartition(worker.topics.grams, 2)] == (10, 1040.0)


def test_the_raise_failpoint_fails_the_nth_pass_only(monkeypatch):
    monkeypatch.setenv("STREAMDET_FAILPOINT", "round-acknowledged:2:raise")
    monkeypatch.setattr(failpoints, "_passes", {})
    failpoints.hit("round-acknowledged")  # first pass: nothing
    failpoints.hit("elsewhere")
    with pytest.raises(failpoints.Failpoint, match="round-acknowledged"):
        failpoints.hit("round-acknowledged")
    failpoints.hit("round-acknowledged")  # past it: nothing again


class _Consumer:
    """A consumer with a record ready at every fetch, noting when each fetch began."""

    def __init__(self, stop, rounds: int) -> None:
        self.stop, self.rounds, self.fetched = stop, rounds, []

    async def getmany(self, timeout_ms: int, max_records: int) -> dict:
        loop = asyncio.get_running_loop()
        self.fetched.append(loop.time())
        if len(self.fetched) >= self.rounds:
            self.stop.set()
        return {"tp": _records(len(self.fetched))}

    def highwater(self, _tp) -> None:  # no fetch response seen: not known to be behind
        return None


class _Behind(_Consumer):
    """The same, its partition always holding more records than a round took."""

    def highwater(self, _tp) -> int:
        return 10**9


@pytest.mark.parametrize(("busy_s", "consumer"),
                         [(0.0, _Consumer), (0.03, _Consumer), (0.03, _Behind)])
def test_rounds_gather_records_only_while_they_keep_the_worker_busy(busy_s, consumer,
                                                                     monkeypatch):
    """A worker whose rounds take no time starts each as soon as records come; one whose
    rounds fill its time waits between their starts (the pacer's wait, at most
    STREAMDET_ROUND_MS), records gathering meanwhile, and shows the wait as a gauge -
    unless its fetches leave records behind: a backlog is there to take at once."""
    worker = Worker("127.0.0.1:1", "unused", Params(), 4,
                    timing=Timing(session_ms=3000, heartbeat_ms=300, round_ms=100))
    worker.pacer = RoundPacer(0.1, window_s=0.2)
    worker.max_records = 1  # a fetch that finds its partition behind fetches no more
    handled, slept = [], []
    real_sleep = asyncio.sleep

    def sleep(seconds):
        slept.append(seconds)
        return real_sleep(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    shown: list[float] = []  # every wait the worker told its sensor
    on_round = worker.sensor.on_round
    monkeypatch.setattr(worker.sensor, "on_round",
                        lambda busy, gather: (shown.append(gather), on_round(busy, gather)))

    async def handle(batch):
        handled.append(batch["tp"][0].offset)
        if busy_s:
            await real_sleep(busy_s)

    async def nothing(*_args, **_kwargs):
        return None

    async def run():
        stop = asyncio.Event()
        worker.consumer = consumer(stop, rounds=16)
        worker._handle, worker._bound_inflight = handle, nothing  # noqa: SLF001
        await worker._rounds(stop)  # noqa: SLF001
        return worker.consumer.fetched

    try:
        fetched = asyncio.run(run())
    finally:
        worker.cpu.shutdown()
    assert handled == list(range(1, 17))
    # the Prometheus sensor's gauge shows the last wait told
    assert shown[-1] == worker.sensor.round_gather._value.get()  # noqa: SLF001
    if busy_s and consumer is _Consumer:
        assert slept and all(0 < s <= 0.1 for s in slept), slept
        gaps = [b - a for a, b in zip(fetched, fetched[1:], strict=False)]
        assert max(gaps) > busy_s + 0.005, gaps  # some rounds started later than at once
        assert max(slept) <= max(shown)  # each sleep is what was left of a wait shown
        assert 0 < shown[-1] <= 0.1  # the gauge still shows a wait when the rounds end
        assert max(shown) <= 0.1
    else:
        assert slept == []  # a round at once
        assert set(shown) == {0.0}


class _Backlog:
    """A consumer over partitions that hold `ends[tp]` records, each fetch bringing the
    next `per_fetch` records of the first partition with any left (as one response of a
    broker that caps its size), each record `size` bytes."""

    def __init__(self, ends: dict, per_fetch: int, size: int = 10) -> None:
        self.ends, self.per_fetch, self.size = ends, per_fetch, size
        self.at = dict.fromkeys(ends, 0)
        self.high: dict = {}
        self.calls = 0

    async def getmany(self, timeout_ms: int, max_records: int) -> dict:
        self.calls += 1
        for tp, end in self.ends.items():
            if self.at[tp] < end:
                n = min(self.per_fetch, end - self.at[tp], max_records)
                recs = [SimpleNamespace(offset=o, value=b"x" * self.size)
                        for o in range(self.at[tp], self.at[tp] + n)]
                self.at[tp] += n
                self.high[tp] = end
                return {tp: recs}
        return {}

    def highwater(self, tp) -> int | None:
        return self.high.get(tp)


def _fetch(consumer: _Backlog, max_records: int, fetch_bytes: int | None = None) -> dict:
    worker = Worker("127.0.0.1:1", "unused", Params(), 4, max_records=max_records)
    try:
        worker.consumer = consumer
        if fetch_bytes is not None:
            worker._fetch_bytes = fetch_bytes  # noqa: SLF001
        return asyncio.run(worker._fetch())  # noqa: SLF001
    finally:
        worker.cpu.shutdown()


def test_a_round_gathers_fetches_while_a_backlog_lasts_up_to_its_records():
    """Under a backlog a round takes fetch after fetch, each partition's records in
    offset order, and stops at max_records (the last fetch asked for what was left)."""
    backlog = _Backlog({"a": 1000, "b": 120}, per_fetch=100)
    batch = _fetch(backlog, max_records=450)
    assert [r.offset for r in batch["a"]] == list(range(450))
    assert "b" not in batch and backlog.calls == 5


def test_a_round_is_one_fetch_when_the_worker_keeps_up():
    backlog = _Backlog({"a": 80, "b": 0}, per_fetch=100)
    batch = _fetch(backlog, max_records=450)
    assert [r.offset for r in batch["a"]] == list(range(80)) and backlog.calls == 1
    assert _fetch(_Backlog({"a": 0}, per_fetch=100), max_records=450) == {}


def test_a_round_stops_gathering_at_the_records_bytes_share():
    """Each fetch here brings 100 records of 1 kB: a round stops once 250 kB are in."""
    backlog = _Backlog({"a": 1000}, per_fetch=100, size=1000)
    batch = _fetch(backlog, max_records=2000, fetch_bytes=250_000)
    assert len(batch["a"]) == 300 and backlog.calls == 3


def test_a_round_keeps_what_a_partition_reads_after_its_position_moved():
    """A rebalance between two fetches resets a partition's position (to the group's
    committed offset): the round holds the records read since, never a run that goes
    back on itself."""
    backlog = _Backlog({"a": 1000}, per_fetch=100)
    real = backlog.getmany

    async def getmany(timeout_ms: int, max_records: int) -> dict:
        if backlog.calls == 2:
            backlog.at["a"] = 150  # the committed offset, after a rebalance
        return await real(timeout_ms, max_records)

    backlog.getmany = getmany
    batch = _fetch(backlog, max_records=450)
    # fetches: 0-99, 100-199, then 150-249 (moved), 250-349, 350-399 (450 records read)
    assert [r.offset for r in batch["a"]] == list(range(150, 400))


def test_a_round_keeps_both_sides_of_a_hole_between_two_fetches():
    """A fetch that skips offsets (a batch the broker did not serve yet) keeps the run
    before the hole: the shard takes it and reads again from the hole (_unapplied)."""
    backlog = _Backlog({"a": 1000}, per_fetch=100)
    real = backlog.getmany

    async def getmany(timeout_ms: int, max_records: int) -> dict:
        if backlog.calls == 1:
            backlog.at["a"] = 103  # 100-102 skipped
        return await real(timeout_ms, max_records)

    backlog.getmany = getmany
    batch = _fetch(backlog, max_records=250)
    assert [r.offset for r in batch["a"]] == [*range(100), *range(103, 253)]


class _Assignable:
    """A consumer's pause / resume / assignment, as aiokafka keeps them."""

    def __init__(self) -> None:
        self.held: set = set()
        self.paused: set = set()

    def assignment(self) -> set:
        return self.held

    def pause(self, *tps) -> None:
        self.paused |= set(tps)

    def resume(self, *tps) -> None:
        self.paused -= set(tps)


def test_shards_assigned_open_in_the_members_loop_not_in_the_listener(monkeypatch):
    """aiokafka heartbeats only once the assignment listener returns, so the listener
    notes the new shards and pauses their inputs; the member's loop opens them (a replay
    may take minutes) and resumes each shard's partitions once it is open. A shard
    revoked before it was opened is not opened."""
    from aiokafka import TopicPartition as TP

    worker = Worker("127.0.0.1:1", "unused", Params(), 4)
    t = worker.topics
    worker.consumer = consumer = _Assignable()
    opened = []

    async def open_shard(kind, index):
        if kind == "gram":
            assert TP(t.grams, index) in consumer.paused  # fetches skip it while replayed
        opened.append((kind, index))
        (worker.gram_shards if kind == "gram" else worker.doc_shards)[index] = object()
        return True

    monkeypatch.setattr(worker, "_open", open_shard)
    assigned = {TP(t.pages, 0), TP(t.grams, 0), TP(t.grams, 1), TP(t.docs, 1),
                TP(t.deltas, 1)}
    consumer.held = set(assigned)

    async def scenario():
        await worker.assigned_now(assigned)
        assert opened == [] and worker.assigned == assigned
        assert consumer.paused == assigned - {TP(t.pages, 0)}
        await worker._drop({TP(t.grams, 1)})  # revoked before it was opened
        consumer.held -= {TP(t.grams, 1)}
        await worker._open_assigned()
        assert opened == [("doc", 1), ("gram", 0)]  # in partition order, as assigned
        assert consumer.paused == {TP(t.grams, 1)}  # the others resumed; that one is gone
        await worker.assigned_now(assigned - {TP(t.grams, 1)})  # the same again: open
        assert worker.opening == []

    asyncio.run(scenario())


class _Closable:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_an_opening_stops_when_a_rebalance_begins(monkeypatch):
    """A rebalance waits for the revocation listener, which waits for the lock an
    opening holds: the opening stops at its next replay chunk (the shard's open step
    returns False), its state is closed, and no other shard opens until the next
    assignment, which opens the shard again if it is still this worker's."""
    from aiokafka import TopicPartition as TP

    worker = Worker("127.0.0.1:1", "unused", Params(), 4)
    t = worker.topics
    worker.consumer = consumer = _Assignable()
    opened, cut = [], _Closable()

    async def open_shard(kind, index):
        opened.append((kind, index))
        if kind == "gram":
            return True
        worker.doc_shards[index] = cut
        worker.revoking = True  # the listener began while this shard replayed
        return False

    monkeypatch.setattr(worker, "_open", open_shard)
    assigned = {TP(t.docs, 1), TP(t.deltas, 1), TP(t.grams, 2)}
    consumer.held = set(assigned)

    async def scenario():
        await worker.assigned_now(assigned)
        await worker._open_assigned()
        assert opened == [("doc", 1)] and cut.closed and 1 not in worker.doc_shards
        assert worker.opening == [("doc", 1), ("gram", 2)] and consumer.paused == assigned
        await worker.revoked(assigned)
        assert worker.opening == [] and worker.revoking
        await worker.assigned_now(assigned)  # given back: opened again from its state
        assert not worker.revoking and worker.opening == [("doc", 1), ("gram", 2)]

    try:
        asyncio.run(scenario())
    finally:
        worker.cpu.shutdown()


def _claims(*answers):
    """claim_shard's (newest epoch, this claim's epoch), one answer per claim."""
    left = list(answers)

    async def claim(*_args):
        return left.pop(0)
    return claim


def test_a_replay_stops_at_the_chunk_after_a_rebalance_began_and_goes_on_later(
        tmp_path, monkeypatch):
    """A gram shard's replay is cut short between two chunks: the state keeps what the
    first chunk applied, the partition's reader is closed, and the next opening replays
    on from there (same owner: the state is not rebuilt)."""
    from aiokafka import TopicPartition as TP

    worker = Worker("127.0.0.1:1", str(tmp_path), Params(), 4)
    readers = []

    async def read_all(_broker, _topic, _partition, start, end, **_kw):
        readers.append([start, "open"])
        try:
            for first in range(start, end, 100):
                yield [SimpleNamespace(offset=o, value=b"", topic=_topic, partition=_partition)
                       for o in range(first, min(first + 100, end))]
                worker.revoking = len(readers) == 1  # the first: a rebalance began
        finally:
            readers[-1][1] = "closed"

    class _Committed(_Seeks):
        async def committed(self, _tp):
            return 300

    monkeypatch.setattr("streamdet.adapters.kafka_shard_log.read_all", read_all)
    monkeypatch.setattr("streamdet.adapters.kafka_shard_log.claim_shard",
                        _claims((0, 1), (1, 2)))
    worker.consumer = _Committed()

    async def scenario():
        assert await worker._open("gram", 3) is False
        shard = worker.gram_shards.pop(3)
        assert shard.offset("grams") == 100
        await worker._cpu(shard.close)
        worker.revoking = False
        assert await worker._open("gram", 3) is True
        assert worker.gram_shards[3].offset("grams") == 300
        await worker._cpu(worker.gram_shards.pop(3).close)

    try:
        asyncio.run(scenario())
    finally:
        worker.cpu.shutdown()
    assert readers == [[0, "closed"], [100, "closed"]]
    assert worker.consumer.seeks == [(TP(worker.topics.grams, 3), 300)]


def test_a_take_over_an_opening_left_unfinished_is_taken_up_by_the_next_one(tmp_path,
                                                                             monkeypatch):
    """The claim of a doc shard whose last owner was another worker takes over; cut
    short, the next claim on this disk (its own epoch the newest) takes over still, on
    the state replayed so far (not rebuilt). A gram shard never takes over."""
    worker = Worker("127.0.0.1:1", str(tmp_path), Params(), 4)
    monkeypatch.setattr("streamdet.adapters.kafka_shard_log.claim_shard",
                        _claims((3, 4), (4, 5), (5, 6), (2, 3)))

    async def scenario():
        shard_log = worker._shard_log()
        first = await claim(shard_log, "doc", 1)
        assert (first.epoch, first.taking_over) == (4, True)
        txn = first.store.begin()
        first.commit(txn, {"docs": 40, "deltas": 7})  # replayed in part
        await worker._cpu(first.close)
        again = await claim(shard_log, "doc", 1)
        assert (again.epoch, again.taking_over, again.offset("docs")) == (5, True, 40)
        await worker._cpu(again.close)
        third = await claim(shard_log, "doc", 1)  # still taking over until take_over commits
        assert third.taking_over
        await worker._cpu(third.close)
        gram = await claim(shard_log, "gram", 0)
        assert not gram.taking_over
        await worker._cpu(gram.close)

    try:
        asyncio.run(scenario())
    finally:
        worker.cpu.shutdown()


@pytest.mark.parametrize("lost", [False, True])
def test_a_shard_whose_segment_file_was_lost_is_rebuilt_by_replay(tmp_path, monkeypatch,
                                                                  caplog, lost):
    """A big segment's file is its pairs' only copy: a gram shard state missing one is
    wiped when claimed (and replayed from the group's offsets), as a state from another
    owner's history is; a whole one is kept."""
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
    monkeypatch.setattr(recent_mod, "CAPACITY", 2)  # the batch's pairs make a segment
    worker = Worker("127.0.0.1:1", str(tmp_path), Params(), 4)
    monkeypatch.setattr("streamdet.adapters.kafka_shard_log.claim_shard", _claims((0, 1)))

    async def scenario():
        shard_log = worker._shard_log()
        state = await shard_log.open("gram", 0)
        txn = state.store.begin()
        grams = np.arange(1, 101, dtype=np.uint64) * 7919
        txn.add_fresh(grams, 3, np.zeros(len(grams), dtype=bool))
        state.commit(txn, {"grams": 10})
        files = sorted((tmp_path / "gram-0" / "segments").glob("*.seg"))
        assert len(files) == 1 and state.store.segments.segments[0].in_file
        await worker._cpu(state.close)
        if lost:
            files[0].unlink()
        claimed = await claim(shard_log, "gram", 0)
        assert claimed.offset("grams") == (0 if lost else 10)
        assert claimed.whole()
        await worker._cpu(claimed.close)

    with caplog.at_level("WARNING"):
        try:
            asyncio.run(scenario())
        finally:
            worker.cpu.shutdown()
    assert ("lost a segment file" in caplog.text) == lost


class _Producer:
    """A producer whose every send is acknowledged at once, noting (topic, partition)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int | None]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int | None = None, headers=None):
        self.sent.append((topic, partition))
        done = asyncio.get_running_loop().create_future()
        done.set_result(SimpleNamespace(offset=len(self.sent) - 1))
        return done


def _adds_worker(tmp_path) -> tuple[Worker, dict]:
    """A worker owning gram shards 0 and 1 (real states), and a fetched batch of one
    page's adds to each, as the pages stage sends them (engine.shards.page_adds)."""
    from streamdet.adapters.payloads import analyze_payloads
    from streamdet.engine.messages import PageMsg
    from streamdet.engine.shards import page_adds

    params = Params()
    worker = Worker("127.0.0.1:1", str(tmp_path), params, 4)
    worker.consumer, worker.producer = _Seeks(), _Producer()
    worker._released = float("inf")  # noqa: SLF001 - no memory release amid the round
    page = {"url": "http://a.example/1", "fetched_at": 1.0,
            "html": "<p>" + " ".join(f"word{i}" for i in range(60)) + "</p>"}
    res = analyze_payloads([json.dumps(page).encode()], params, 1 << 20)[0]
    msg = PageMsg(res.url, res.server, res.grams, res.fetched_at, res.text, res.sentences,
                  res.sketch, res.chunks)
    adds = dict(page_adds(msg, docno=7, shards=4))
    batch = {}
    for g in (0, 1):
        worker.gram_shards[g] = Shard("gram", g, str(tmp_path / f"gram-{g}"), params, 4)
        tp = TopicPartition(worker.topics.grams, g)
        worker.assigned.add(tp)
        batch[tp] = [SimpleNamespace(offset=0, value=adds[g], key=None, timestamp=0)]
    return worker, batch


def _close(worker: Worker) -> None:
    for shard in worker.gram_shards.values():
        shard.close()
    worker.cpu.shutdown()


def test_a_rounds_shard_steps_take_one_hand_off_to_the_engine_thread(tmp_path):
    """Every shard step of a round runs in one call on the engine thread (a hand-off
    trades the GIL between the loop and that thread); then each shard queues its outbox
    and the round records each shard's offsets."""
    worker, batch = _adds_worker(tmp_path)
    calls = []
    cpu = worker._cpu  # noqa: SLF001

    async def counted(fn, *args):
        calls.append(fn)
        return await cpu(fn, *args)

    worker._cpu = counted  # noqa: SLF001
    seconds = metrics().batch_seconds.labels("gram_shard")._sum.get()
    try:
        asyncio.run(worker._handle(batch))  # noqa: SLF001
        offsets = {g: s.offset("grams") for g, s in worker.gram_shards.items()}
    finally:
        _close(worker)
    assert len(calls) == 1, calls
    assert offsets == {0: 1, 1: 1}
    assert worker.applied == {TopicPartition(worker.topics.grams, 0): 1,
                              TopicPartition(worker.topics.grams, 1): 1}
    assert {t for t, _ in worker.producer.sent} == {worker.topics.deltas}  # both outboxes
    assert metrics().batch_seconds.labels("gram_shard")._sum.get() > seconds


def test_a_failed_shard_step_ends_the_round_after_the_steps_before_it(tmp_path,
                                                                       monkeypatch):
    """The step that fails is raised on the loop; the steps before it are committed and
    their outboxes queued, the steps after it are not taken: no shard commits past a
    step that failed."""
    from streamdet.adapters import worker as worker_module

    worker, batch = _adds_worker(tmp_path)
    real = worker_module.process_grams

    def process_grams(shard, role, msgs, end):
        if shard.index == 1:
            raise RuntimeError("gram shard 1 fails")
        return real(shard, role, msgs, end)

    monkeypatch.setattr(worker_module, "process_grams", process_grams)
    batch[TopicPartition(worker.topics.grams, 2)] = batch[
        TopicPartition(worker.topics.grams, 1)]
    worker.gram_shards[2] = Shard("gram", 2, str(tmp_path / "gram-2"), Params(), 4)
    worker.assigned.add(TopicPartition(worker.topics.grams, 2))
    try:
        with pytest.raises(RuntimeError, match="gram shard 1 fails"):
            asyncio.run(worker._handle(batch))  # noqa: SLF001
        offsets = {g: s.offset("grams") for g, s in worker.gram_shards.items()}
    finally:
        _close(worker)
    assert offsets == {0: 1, 1: 0, 2: 0}
    assert worker.producer.sent  # gram shard 0's outbox, the one step before
