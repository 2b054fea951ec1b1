"""What a state writes, per table (state.write_counts): every backend counts the
operations and bytes its committed writes carried, the same for the same writes, and
`streamdet run`'s metrics report them."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from streamdet.adapters.embedded import EmbeddedRunner
from streamdet.adapters.inputs import open_source
from streamdet.adapters.metrics import Metrics
from streamdet.adapters.outputs import JsonlSink
from streamdet.engine.params import Params
from streamdet.state.kv import DeleteRange, MemoryKV
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store

from .cli_helpers import build_crawl, write_jsonl


def _kv(kind: str, tmp_path):
    return MemoryKV() if kind == "memory" else RocksKV(str(tmp_path / "state"))


def _tally(ops) -> dict[str, tuple[int, int]]:
    """The test's own count of a list of ops: per table, ops and key + value bytes."""
    out: dict[str, tuple[int, int]] = {}
    for table, key, value in ops:
        size = len(key) + (0 if value is None else len(value.end)
                           if isinstance(value, DeleteRange) else len(value))
        n, b = out.get(table, (0, 0))
        out[table] = (n + 1, b + size)
    return out


@pytest.mark.parametrize("kind", ["memory", "rocks"])
def test_a_backend_counts_what_its_writes_carried(kind, tmp_path):
    kv = _kv(kind, tmp_path)
    first = [("docs", b"k1", b"v" * 10), ("docs", b"k2", b"w" * 3), ("names", b"n", b"")]
    second = [("docs", b"k1", None), ("grams", b"a", DeleteRange(b"b")),
              ("names", b"n2", b"xyz")]
    kv.write(iter(first))  # a generator, as Txn.commit passes them
    kv.write(second)
    both = _tally(first + second)
    assert kv.take_written() == both
    assert kv.take_written() == {}  # taken: counted again from nothing
    kv.write([("segs", b"c1", b"1234"), ("segs", b"c2", b"56")], sync=True)
    assert kv.take_written() == {"segs": (2, 10)}


@pytest.mark.parametrize("kind", ["memory", "rocks"])
def test_a_write_that_fails_counts_nothing(kind, tmp_path):
    kv = _kv(kind, tmp_path)
    with pytest.raises(KeyError):
        kv.write([("docs", b"k", b"v"), ("no such table", b"k", b"v")])
    assert kv.take_written() == {}
    assert kv.get("docs", b"k") is None


class TallyingKV(MemoryKV):
    """A MemoryKV that also tallies every op itself, to check the counts against."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []

    def write(self, ops) -> None:
        ops = list(ops)
        self.ops += ops
        super().write(ops)


def test_run_reports_its_writes_per_table(tmp_path):
    crawl = build_crawl(seed=5, n_pages=60, n_quilts=6)
    path = write_jsonl(tmp_path / "in.jsonl", crawl)
    reg, kv = CollectorRegistry(), TallyingKV()
    events, dead = JsonlSink(None), JsonlSink(None)
    EmbeddedRunner(Store(kv), Params(), events, dead, batch_size=16,
                   sensor=Metrics(reg)).run([open_source(str(path))])
    tally = _tally(kv.ops)
    assert {"grams", "docs", "names", "urls", "texts"} <= set(tally)
    for table, (ops, nbytes) in tally.items():
        labels = {"table": table}
        assert reg.get_sample_value("streamdet_state_write_ops_total", labels) == ops
        assert reg.get_sample_value("streamdet_state_write_bytes_total", labels) == nbytes
