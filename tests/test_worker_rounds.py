"""The worker's guards around a round (adapters.worker), without a broker: a fetch that
skips records past a shard state's offset is refused (applying it would lose them), and
the `raise` failpoint the pipeline tests use to fail a round. The same paths with a real
broker and real workers: test_kafka_pipeline's rejoin tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from streamdet.adapters import failpoints
from streamdet.adapters.worker import Shard, SkippedRecords, _from_state
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
