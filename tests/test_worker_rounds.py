"""The worker's guards around a round (adapters.worker), without a broker: a fetch that
skips records past a shard state's offset is refused (applying it would lose them), and
the `raise` failpoint the pipeline tests use to fail a round. The same paths with a real
broker and real workers: test_kafka_pipeline's rejoin tests."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from streamdet.adapters import failpoints
from streamdet.adapters.kafka import Timing
from streamdet.adapters.worker import Shard, SkippedRecords, Worker, _from_state
from streamdet.engine.params import Params


def _records(*offsets: int) -> list:
    return [SimpleNamespace(offset=o) for o in offsets]


@pytest.fixture
def shard(tmp_path):
    """A gram shard's real state whose grams input is applied up to offset 10."""
    s = Shard("gram", 2, str(tmp_path / "gram-2"), Params(), 4)
    txn = s.store.begin()
    s.commit(txn, {"grams": 10})
    yield s
    s.close()


def test_records_already_applied_are_dropped_and_the_rest_must_follow_on(shard):
    assert [r.offset for r in _from_state(shard, "grams", _records(8, 9, 10, 11))] == [10, 11]
    assert _from_state(shard, "grams", _records(7, 8, 9)) == []
    assert [r.offset for r in _from_state(shard, "grams", _records(10))] == [10]
    assert _from_state(shard, "grams", []) == []


def test_a_fetch_that_starts_past_the_state_is_refused(shard):
    with pytest.raises(SkippedRecords, match=r"gram shard 2: grams records fetched from "
                                             r"offset 12, but its state is at 10"):
        _from_state(shard, "grams", _records(12, 13))


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


@pytest.mark.parametrize("round_ms", [0, 40])
def test_rounds_start_no_closer_than_the_round_interval(round_ms, monkeypatch):
    """STREAMDET_ROUND_MS: a worker takes a round at most every round_ms (records gather
    meanwhile), and at once when it is 0."""
    worker = Worker("127.0.0.1:1", "unused", Params(), 4,
                    timing=Timing(session_ms=3000, heartbeat_ms=300, round_ms=round_ms))
    handled, slept = [], []
    real_sleep = asyncio.sleep

    def sleep(seconds):
        slept.append(seconds)
        return real_sleep(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)

    async def handle(batch):
        handled.append(batch["tp"][0].offset)

    async def nothing(*_args, **_kwargs):
        return None

    async def run():
        stop = asyncio.Event()
        worker.consumer = _Consumer(stop, rounds=5)
        worker._handle, worker._bound_inflight = handle, nothing  # noqa: SLF001
        await worker._rounds(stop)  # noqa: SLF001
        return worker.consumer.fetched

    try:
        fetched = asyncio.run(run())
    finally:
        worker.cpu.shutdown()
    assert handled == [1, 2, 3, 4, 5]
    gaps = [b - a for a, b in zip(fetched, fetched[1:], strict=False)]
    if round_ms:
        assert len(slept) == 4 and all(0 < s <= round_ms / 1000 for s in slept), slept
        assert min(gaps) >= round_ms / 1000 - 0.005, gaps  # the loop's clock resolution
    else:
        assert slept == []  # a round at once
