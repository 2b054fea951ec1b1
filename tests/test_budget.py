"""The memory budget (state.budget, `--memory`): sizes read as operators write them, the
shares it gives out, runs under the smallest budget and the default one that agree, and
batches sized by the documents they hold (adapters.batch_sizer)."""

from __future__ import annotations

import json

import pytest

from streamdet.adapters.batch_sizer import MIN_RECORDS, BatchSizer
from streamdet.adapters.embedded import EmbeddedRunner
from streamdet.adapters.inputs import open_source
from streamdet.adapters.outputs import JsonlSink
from streamdet.engine.documents import DOC_SLOT_BYTES, DocResult
from streamdet.engine.keyed import key_u64
from streamdet.engine.params import Params
from streamdet.state.budget import ANALYSIS_PROCESS_BYTES, MemoryBudget, parse_bytes
from streamdet.state.posting_cache import YOUNG_ENTRY_BYTES
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store

from .cli_helpers import build_crawl, dump, streamdet, write_jsonl


@pytest.mark.parametrize(("text", "expected"), [
    ("1GiB", 1 << 30), ("1gib", 1 << 30), ("512MiB", 512 << 20), ("512MB", 512 * 10**6),
    ("1.5G", 1_500_000_000), ("800000000", 800_000_000), (" 2 TiB ", 2 << 40), ("64k", 64000)])
def test_sizes_are_read_in_both_kinds_of_units(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "1 GiBs", "-1GB", "1e9", "GiB"])
def test_what_is_no_size_is_refused_with_the_reason(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_bytes(text)


def test_a_budget_below_the_minimum_is_refused():
    with pytest.raises(ValueError, match="too small"):
        MemoryBudget.parse("200MiB")
    assert MemoryBudget.parse("256MiB").total == 256 << 20


def test_shares_scale_with_the_budget_and_stay_inside_it():
    small, big = MemoryBudget(256 << 20), MemoryBudget(4 << 30)
    for b in (small, big):
        sized = (b.block_cache + b.doc_slots * DOC_SLOT_BYTES + b.postings + b.names * 250
                 + b.records)
        assert sized <= b.total * 13 // 16  # the rest is the batch in hand's working memory
        assert b.memtables < b.block_cache  # memtables are charged to the cache
    for share in ("doc_slots", "postings", "names", "block_cache", "records"):
        assert abs(getattr(big, share) - 16 * getattr(small, share)) <= 16, share
    assert MemoryBudget().batch_bytes(3) == (1 << 30) // 4 // 3


@pytest.mark.parametrize("shards", [1, 4, 8])
def test_a_shard_state_gets_a_part_of_the_shares_its_role_reads(shards):
    """A worker's states (state.budget.ShardShare): documents to doc shards, overlay
    postings to gram shards, names to both; a worker that owns every shard holds at most
    the whole of each share, and one state no more than a 1/shards part of it."""
    whole = MemoryBudget(768 << 20)
    doc, gram = whole.shard_state("doc", shards), whole.shard_state("gram", shards)
    assert doc.postings == 0 and gram.doc_slots == 0
    assert doc.doc_slots == whole.doc_slots // shards
    assert gram.postings == whole.postings // shards
    for share in ("doc_slots", "postings", "names", "memtables"):
        held = shards * (getattr(doc, share) + getattr(gram, share))
        assert getattr(whole, share) - 2 * shards <= held <= getattr(whole, share), share
    assert doc.block_cache == gram.block_cache == whole.block_cache  # one cache, shared
    with pytest.raises(ValueError, match="no shard role"):
        whole.shard_state("site", shards)


def test_analysis_processes_are_charged_before_the_budget_is_shared_out():
    budget = MemoryBudget(1 << 30)
    assert budget.for_analysis(0) == budget
    assert budget.for_analysis(1).total == (1 << 30) - ANALYSIS_PROCESS_BYTES
    assert budget.for_analysis(2).total == (1 << 30) - 2 * ANALYSIS_PROCESS_BYTES
    assert budget.for_analysis(1).doc_slots < budget.doc_slots
    # many processes on a small budget: the engine's caches keep a quarter of it
    assert MemoryBudget(256 << 20).for_analysis(8).total == 64 << 20


@pytest.mark.parametrize(("analyzers", "charged"), [(0, 0), (1, 1), (3, 3)])
def test_run_and_worker_share_out_what_their_analysis_processes_leave(analyzers, charged):
    from argparse import Namespace

    from streamdet.cli import memory_budget

    got = memory_budget(Namespace(memory="2GiB"), analyzers)
    assert got.total == (2 << 30) - charged * ANALYSIS_PROCESS_BYTES


def test_run_and_worker_read_the_analysis_processes_alike():
    from argparse import Namespace

    from streamdet.adapters.analyzers import default_processes
    from streamdet.cli import UsageError, analysis_processes

    assert analysis_processes(Namespace(analyzers=None)) == default_processes()
    assert analysis_processes(Namespace(analyzers=0)) == 0
    assert analysis_processes(Namespace(analyzers=3)) == 3
    with pytest.raises(UsageError, match="--analyzers must be 0 or more, got -1"):
        analysis_processes(Namespace(analyzers=-1))


def test_a_state_takes_its_caches_from_the_budget(tmp_path):
    budget = MemoryBudget(512 << 20)
    kv = RocksKV(str(tmp_path / "s"), budget=budget)
    try:
        store = Store(kv)
        assert store.budget is budget
        postings = store.postings  # its young dict and packed arrays share the budget's part
        assert postings.young_entries * YOUNG_ENTRY_BYTES + postings.packed_bytes \
            == budget.postings
        assert store.names.half == budget.names // 2
        assert kv.cache.get_usage() <= budget.block_cache
    finally:
        kv.close()


def test_runs_under_the_smallest_budget_and_the_default_one_agree(tmp_path):
    crawl = build_crawl(seed=11, n_pages=60, n_quilts=15)
    path = write_jsonl(tmp_path / "crawl.jsonl", crawl)
    dumps = []
    for memory in ("256MiB", "1GiB"):
        state = tmp_path / f"state-{memory}"
        streamdet("run", "--input", path, "--state", state, "--events",
                  tmp_path / f"ev-{memory}.jsonl", "--memory", memory, "--batch", "7")
        dumps.append(streamdet("dump", "--state", state).stdout)
    assert dumps[0] == dumps[1]
    rows = [json.loads(line) for line in dumps[0].splitlines()]
    assert len(rows) >= 60 and any(r["quilted"] for r in rows)


def test_the_sizer_shrinks_to_the_slots_a_batch_may_hold_and_grows_back_slowly():
    sizer = BatchSizer(512, slots=1_000_000)
    assert sizer.records == 512
    assert sizer.observe(400, 4_000_000) == 100  # 10,000 slots a record: 100 fit
    assert sizer.observe(100, 500_000) == 126  # fewer slots: up by a quarter at most
    assert sizer.observe(126, 10**9) == MIN_RECORDS  # never below the floor
    for _ in range(40):
        sizer.observe(sizer.records, 0)
    assert sizer.records == 512  # back to --batch, not past it
    assert sizer.observe(0, 10**9) == 512  # an empty batch tells nothing
    assert BatchSizer(5, slots=1).observe(5, 10**6) == 5  # --batch below the floor wins
    assert BatchSizer(512, slots=1, floor=2).observe(100, 10**6) == 2  # a floor of its own


def test_a_transaction_counts_the_slots_it_holds(tmp_path):
    crawl = build_crawl(seed=5, n_pages=30, n_quilts=6)
    path = write_jsonl(tmp_path / "crawl.jsonl", crawl)
    state = tmp_path / "s"
    streamdet("run", "--input", path, "--state", state, "--events", tmp_path / "ev.jsonl")
    store = Store(RocksKV(str(state)))
    try:
        txn = store.begin()
        docnos = [key_u64(k) for k, _ in store.kv.items("docs")]
        docs = [txn.doc(d) for d in docnos]
        # only read, a document stays folded and packed: it weighs what it holds, never
        # more than worked on
        resident = [min(d.resident_weight, d.weight) for d in docs]
        assert txn.held_slots() == sum(resident) > 0
        # worked on (its index built), a slot each and a third of one a (source, slot)
        # pair (DocState.weight): more than as it was read
        for d in docs:
            d.slots_of([])
        weight = [len(d.slots) + len(d.pairs) // 3 for d in docs]
        assert txn.held_slots() == sum(weight) > sum(len(d.slots) for d in docs) > 0
        assert sum(weight) > sum(resident)
        big = max(range(len(docs)), key=lambda i: weight[i] - resident[i])
        assert weight[big] > resident[big]
        docs[big].fold()  # folded unchanged: back to what it holds (its pairs unpacked)
        now = min(docs[big].resident_weight, weight[big])
        assert txn.held_slots() == sum(weight) - weight[big] + now < sum(weight)
        docs[big].result = DocResult()  # changed: its full weight, folded or not
        assert docs[big].folded and txn.held_slots() == sum(weight)
    finally:
        store.close()


def test_batches_close_sooner_when_they_hold_more_and_the_result_is_the_same(tmp_path):
    """The embedded runner with a tiny share for a batch's documents closes its batches
    at fewer records than --batch, and ends with the state a fixed batch gives."""
    crawl = build_crawl(seed=11, n_pages=80, n_quilts=12)
    path = write_jsonl(tmp_path / "crawl.jsonl", crawl)
    sizes: dict[str, list[int]] = {}
    for name, slots in (("fixed", 10**9), ("sized", 3_000)):
        store = Store(RocksKV(str(tmp_path / name)))
        events = JsonlSink(str(tmp_path / f"{name}-ev.jsonl"))
        dead = JsonlSink(str(tmp_path / f"{name}-dl.jsonl"))
        seen = sizes[name] = []

        def on_batch(summary, seen=seen):
            seen.append(summary.pages - sum(seen))
        runner = EmbeddedRunner(store, Params(), events, dead, batch_size=40, on_batch=on_batch)
        runner.sizer = BatchSizer(40, slots)
        try:
            runner.run([open_source(str(path))])
        finally:
            events.close()
            dead.close()
            store.close()
    assert set(sizes["fixed"][:-1]) == {40}
    # (the batch after the first is closed while the first is applied)
    assert max(sizes["sized"][2:]) < 40 and len(sizes["sized"]) > len(sizes["fixed"])
    assert dump(tmp_path / "sized") == dump(tmp_path / "fixed")
