"""loadtest/profile_worker.py: how a worker's samples are charged, and its table."""

from __future__ import annotations

from pathlib import Path

from loadtest import profile_worker as pw

ENGINE = "thread (7): streamdet-engine_0"
STEP = "Worker._gram_shard.<locals>.work (streamdet/adapters/worker.py:499)"


def test_a_sample_goes_to_its_stage_and_innermost_known_part():
    prefetch = "Txn.prefetch (streamdet/state/txn.py:210)"
    find = "SegmentIndex.find (streamdet/state/segments.py:447)"
    assert pw.charge([ENGINE, STEP, prefetch, find, "unique (numpy/x.py:1)"]) == (
        "gram shard step", "segment lookups")
    assert pw.charge([ENGINE, STEP, prefetch]) == ("gram shard step", "other gram lookups")
    assert pw.charge([ENGINE, STEP, "Step.commit (streamdet/engine/shard_step.py:184)",
                      "Txn.commit (streamdet/state/txn.py:701)"]) == ("gram shard step", "commit")
    assert pw.charge(["thread (1): MainThread", "EpollSelector.select (selectors.py:468)"]) == (
        "event loop (aiokafka)", "epoll, and the GIL after it")
    assert pw.charge([ENGINE, "call_soon (x.py:1)"]) == ("engine thread, other", "the rest")


def test_read_sums_the_samples_of_a_raw_profile(tmp_path: Path):
    raw = tmp_path / "raw.txt"
    raw.write_text(f"{ENGINE};{STEP} 3\n{ENGINE};{STEP} 2\nthread (1): MainThread 4\n")
    assert pw.read(raw) == {("gram shard step", "the rest"): 5,
                            ("event loop (aiokafka)", "the rest"): 4}


def test_the_table_gives_ms_a_page_of_each_phase_and_their_ratio():
    res = {"backlog": {"pages": 1000, "cpu_s": 20.0, "parts": {"a / x": 2.0, "b / y": 1.0}},
           "paced": {"pages": 500, "cpu_s": 30.0, "rate": 8.0, "p50_s": 1.0, "p99_s": 3.0,
                     "parts": {"a / x": 3.0, "c / z": 0.5}}}
    text = pw.table(res)
    assert "20.0 ms of CPU a page under a backlog" in text and "60.0 paced" in text
    assert "| a / x | 2.0 | 6.0 | 3.0x |" in text
    assert "| c / z | 0.0 | 1.0 | |" in text and "| b / y | 1.0 | 0.0 | 0.0x |" in text
    assert "| all | 3.0 | 7.0 | 2.3x |" in text


def test_rebalances_are_counted_from_the_workers_logs(tmp_path: Path):
    class Pipe:
        work, prefix = tmp_path, "p-1"

    (tmp_path / "p-1-w0.log").write_text(
        "WARNING aiokafka: Heartbeat failed: local member_id was not recognized; resetting\n"
        "INFO streamdet.worker: doc shard 0: replaying docs 0..903, deltas 0..5627\n"
        "INFO streamdet.worker: doc shard 0: taken over; 675 URLs shown, 8 events\n"
        "INFO streamdet.worker: doc shard 0: deltas: offset 4072 missing from a fetch; "
        "reading again from it\n"
        "ERROR streamdet.worker: worker: boom; leaving the group and joining it again from "
        "the shards' states in 1 s\n")
    (tmp_path / "p-1-w1.log").write_text(
        "INFO streamdet.worker: gram shard 1: replaying 0..3\n"
        "INFO streamdet.worker: doc shard 3: opening cut short by a rebalance\n")
    (tmp_path / "other-w0.log").write_text("gram shard 1: replaying 0..3\n")
    assert pw.log_counts(Pipe) == {"sessions expired": 1, "shards replayed": 2,
                                   "doc shards taken over": 1, "rejoins": 1, "fetch gaps": 1,
                                   "openings cut short": 1}
    res = {"backlog": {"pages": 10, "cpu_s": 1.0, "parts": {}, "rebalances":
                       {"sessions expired": 0}},
           "paced": {"pages": 10, "cpu_s": 2.0, "rate": 8.0, "p50_s": 1.0, "p99_s": 3.0,
                     "parts": {"a / x": 1.0}, "rebalances": {"sessions expired": 2}}}
    text = pw.table(res)
    assert "Rebalances under the backlog: sessions expired 0." in text
    assert "Rebalances paced: sessions expired 2." in text


def test_a_measured_phase_takes_cpu_and_rebalances_before_py_spy_stops(tmp_path, monkeypatch):
    stopped = []

    class FakeSpy:
        def __init__(self, pid, out):
            assert (pid, out) == (7, tmp_path / "p.txt")

        def stop(self):
            stopped.append(True)

    class Pipe:
        work, prefix, procs = tmp_path, "q-1", [type("P", (), {"pid": 7})()]
        seconds = iter([10.0, 14.5])

        def cpu(self):
            assert not stopped  # read while py-spy still samples the phase
            return next(self.seconds)

    monkeypatch.setattr(pw, "Spy", FakeSpy)
    log = tmp_path / "q-1-w0.log"
    log.write_text("gram shard 0: replaying 0..9\n")
    with pw._measured(Pipe(), tmp_path / "p.txt") as got:
        log.write_text("gram shard 0: replaying 0..9\ndoc shard 1: replaying docs 0..3\n")
    assert got == {"cpu_s": 4.5, "rebalances": {
        "sessions expired": 0, "shards replayed": 1, "doc shards taken over": 0, "rejoins": 0,
        "fetch gaps": 0, "openings cut short": 0}}
    assert stopped == [True]
