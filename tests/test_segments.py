"""The gram index's segments: Bloom filters, lookups, compaction, crash leftovers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.keyed import u64key
from streamdet.state import recent as recent_mod
from streamdet.state import segments as seg_mod
from streamdet.state.bloom import BlockedBloom, Probe, SplitBlockBloom
from streamdet.state.budget import MemoryBudget
from streamdet.state.cache import Generations
from streamdet.state.kv import MemoryKV
from streamdet.state.rocks import RocksKV
from streamdet.state.schema import encode_posting
from streamdet.state.segment_files import SegmentFiles
from streamdet.state.segments import SegmentIndex

from .harness import assert_same_rows, first_holders, memory_pipeline, rocks_reopen_pipeline
from .reference import reference
from .strategies import any_corpus_st


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _grams(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64))


@pytest.mark.parametrize(("layout", "at_most"), [(SplitBlockBloom, 0.0004),
                                                 (BlockedBloom, 0.0016)])
def test_bloom_has_no_false_negatives_and_few_false_positives(layout, at_most):
    """Both layouts at 24 bits a key: the split-block one written now (expected 0.016%),
    the one-word one of formats up to 5 (0.11%); bounds at ~1.5-2.5x the expectation."""
    rng = np.random.default_rng(7)
    keys = _grams(rng, 200_000)
    bloom = layout.build(np.sort(keys))
    assert bloom.may_contain(Probe(keys)).all()
    others = _grams(rng, 1_000_000)
    others = others[~np.isin(others, keys)]
    probe = Probe(others)
    fpr = bloom.may_contain(probe).mean()
    assert 0 < fpr < at_most
    again = layout.from_bytes(bloom.to_bytes())
    assert np.array_equal(again.may_contain(probe), bloom.may_contain(probe))


def test_a_split_bloom_filled_slice_by_slice_is_the_one_built_at_once():
    """Merges fill a segment's filter a sorted slice at a time."""
    keys = np.sort(_grams(np.random.default_rng(8), 30_000))
    sliced = SplitBlockBloom.sized(len(keys))
    for part in np.array_split(keys, 7):
        sliced.add_sorted(part)
    assert np.array_equal(sliced.words, SplitBlockBloom.build(keys).words)


@pytest.fixture(params=["memory", "rocks", "files"])
def kv(request, tmp_path, monkeypatch):
    """A KV, and for "files" segment files beside it that every segment uses (_index)."""
    store = MemoryKV() if request.param == "memory" else RocksKV(str(tmp_path / "db"))
    if request.param == "files":
        monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
        monkeypatch.setattr(seg_mod, "WINDOW_BYTES", 4096)  # lookups cross many windows
        store.test_files = SegmentFiles(str(tmp_path / "db" / "segments"), writable=True)
    yield store
    store.close()


def _index(kv) -> SegmentIndex:
    return SegmentIndex(kv, getattr(kv, "test_files", None))


def _add(index: SegmentIndex, kv, grams: np.ndarray, docnos: np.ndarray) -> None:
    keys, manifest, seg = index.new_segment_ops(grams, docnos)
    kv.write([*keys, manifest])
    index.installed(seg)


def _written(index: SegmentIndex, kv, rng: np.random.Generator, batches: int,
             n: int) -> dict[int, int]:
    """`batches` segments of ~n new grams each, random holders; gram -> holder."""
    truth: dict[int, int] = {}
    for _batch in range(batches):
        g = _grams(rng, n)
        g = g[~np.isin(g, np.fromiter(truth, dtype=np.uint64, count=len(truth)))]
        d = rng.integers(1, 1000, len(g)).astype(np.uint64)
        truth.update(zip(g.tolist(), d.tolist(), strict=True))
        _add(index, kv, g, d)
    return truth


def test_find_returns_exactly_the_pairs_written(kv):
    rng = np.random.default_rng(1)
    index = _index(kv)
    truth = _written(index, kv, rng, 6, 3000)
    probe = np.concatenate([np.fromiter(truth, dtype=np.uint64), _grams(rng, 5000)])
    found = first_holders(index, np.unique(probe))
    assert found == truth
    counts = index.counts
    assert counts.grams == len(np.unique(probe)) and counts.found == len(truth)
    # every gram found needs its chunk (64 pairs); a read in vain found none
    assert -(-len(truth) // seg_mod.CHUNK) <= counts.chunk_reads - counts.vain_reads

    # grams never written: every read is in vain; ~0.1% pass each of 6 segments' filters
    before = counts.chunk_reads
    absent = _grams(rng, 2_000)
    assert first_holders(index, absent[~np.isin(absent, probe)]) == {}
    assert counts.chunk_reads - before == counts.vain_reads
    assert 0 < counts.vain_reads < 2_000 * 6 * 0.002

    # a new index over the same KV (a restart) sees the same segments
    assert first_holders(_index(kv), np.unique(probe)) == truth


def test_find_with_the_filters_answers_reads_the_same_pairs_without_probing_again(
        kv, monkeypatch):
    rng = np.random.default_rng(4)
    index = _index(kv)
    truth = _written(index, kv, rng, 4, 2000)
    probe = np.unique(np.concatenate([np.fromiter(truth, dtype=np.uint64), _grams(rng, 3000)]))
    admitted = index.maybe(Probe(probe))
    assert admitted.any[np.isin(probe, np.fromiter(truth, dtype=np.uint64))].all()
    assert [s for s, _ in admitted.per_segment] == index.segments
    # a subset in another order, as the overlay and the recent pairs leave it
    asked = rng.permutation(probe[admitted.any])[: len(truth) // 2]
    probes = []
    monkeypatch.setattr(seg_mod.Segment, "may_contain",
                        lambda self, p: probes.append(self.id) or np.ones(len(p.grams), bool))
    found = first_holders(index, asked, admitted)
    assert probes == []
    assert found == {g: truth[g] for g in asked.tolist() if g in truth}
    assert first_holders(index, asked) == found  # without the answers: every filter probed again
    assert len(probes) == len(index.segments)


@pytest.mark.parametrize("merge_slice", [1 << 20, 100])  # one slice; ~30 slices a merge
def test_compaction_merges_tiers_drops_withdrawn_pairs_but_keeps_overlay_grams(kv, monkeypatch,
                                                                          merge_slice):
    monkeypatch.setattr(seg_mod, "MERGE_FANIN", 2)
    monkeypatch.setattr(seg_mod, "MERGE_SLICE", merge_slice)
    rng = np.random.default_rng(2)
    index = _index(kv)
    batches = []
    for docno in (11, 12, 13, 14):
        g = _grams(rng, 2000)
        batches.append(g)
        _add(index, kv, g, np.full(len(g), docno, dtype=np.uint64))
    # doc 12 was withdrawn; one of its grams still has an overlay entry (another holder)
    kept = int(batches[1][5])
    kv.write([("grams", u64key(kept), encode_posting((99,)))])
    assert len(index.segments) == 4
    puts = _Puts(kv, monkeypatch)  # a merge's chunks go in one put, however many slices
    merges = index.compact(withdrawn={12})
    assert merges >= 1 and len(index.segments) < 4
    assert puts.n <= 3 * merges  # chunks, the filter and fences, the switch
    everything = np.unique(np.concatenate(batches))
    found = first_holders(index, everything)
    assert set(found) == set(everything.tolist()) - set(batches[1].tolist()) | {kept}
    assert found[kept] == 12
    assert first_holders(_index(kv), everything) == found
    assert {seg_mod._KEY.unpack(k)[0] for k, _ in kv.items("segs")} == {
        s.id for s in index.segments if not s.in_file}  # nothing of the merged-away ones
    # written slice by slice, the merged segment is still one sorted run in full chunks
    merged = max(index.segments, key=lambda x: x.n)
    g, _ = _pairs_of(kv, merged)
    assert len(g) == merged.n and (g[1:] > g[:-1]).all()
    assert np.array_equal(merged.fences, g[::seg_mod.CHUNK])


def _pairs_of(kv, seg) -> tuple[np.ndarray, np.ndarray]:
    """A segment's pairs as stored: from its file, else its chunks (each full but the
    last)."""
    if seg.in_file:
        assert not [k for k, _ in _segment_keys(kv, seg.id)]  # none in the KV
        assert len(seg.parts.pair_data) == seg.n * seg.packing.pair_bytes + 8
        grams, rel = seg.pair_columns()
        return grams.copy(), seg.packing.docnos(rel)
    n_chunks = -(-seg.n // seg_mod.CHUNK)
    raws = kv.get_many("segs", [seg_mod.seg_key(seg.id, b"c", i) for i in range(n_chunks)])
    assert None not in raws
    assert all(len(r) == seg.packing.pair_bytes * seg_mod.CHUNK for r in raws[:-1])
    return seg.packing.decode(raws)


class _Puts:
    """A KV's write calls, counted."""

    def __init__(self, kv, monkeypatch) -> None:
        self.n = 0
        write = kv.write

        def counted(ops, sync=False):
            self.n += 1
            return write(ops, sync)
        monkeypatch.setattr(kv, "write", counted)


@given(lo=st.integers(0, 2**64 - 2), spread=st.integers(0, 2**64 - 1),
       n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_a_packing_round_trips_any_docno_range_in_as_few_bytes_as_it_needs(lo, spread, n, seed):
    rng = np.random.default_rng(seed)
    hi = min(lo + spread, 2**64 - 1)
    docnos = rng.integers(lo, hi, n, dtype=np.uint64, endpoint=True)
    grams = np.sort(rng.integers(0, 2**64 - 1, n, dtype=np.uint64))
    packing = seg_mod.Packing.of(docnos)
    assert (packing.hi - packing.lo) < 1 << 8 * packing.docno_bytes
    assert packing.docno_bytes == 1 or packing.hi - packing.lo >= 1 << 8 * (packing.docno_bytes - 1)
    blob = packing.encode(grams, docnos)
    assert len(blob) == n * packing.pair_bytes
    cut = n // 2 * packing.pair_bytes  # chunks are decoded concatenated
    g, d = packing.decode([blob[:cut], blob[cut:]])
    assert np.array_equal(g, grams) and np.array_equal(d, docnos)


def test_packed_pairs_take_11_bytes_for_a_range_of_100000_docnos(kv):
    rng = np.random.default_rng(4)
    index = _index(kv)
    g = _grams(rng, 5000)
    _add(index, kv, g, rng.integers(400_000, 500_000, len(g)).astype(np.uint64))
    (seg,) = index.segments
    assert seg.packing.pair_bytes == 11
    assert len(_pairs_of(kv, seg)[0]) == len(g)
    values = [v for k, v in kv.items("segs") if k[4:5] == b"c"]
    assert sum(map(len, values)) == (0 if seg.in_file else 11 * len(g))


def _write_legacy_segment(kv, seg_id: int, grams: np.ndarray, docnos: np.ndarray) -> None:
    """A segment as state format 4 wrote it: chunks of grams then docnos, u64 each, and a
    manifest entry [id, n]."""
    ops = []
    for i in range(0, len(grams), seg_mod.CHUNK):
        value = (grams[i : i + seg_mod.CHUNK].astype("<u8").tobytes()
                 + docnos[i : i + seg_mod.CHUNK].astype("<u8").tobytes())
        ops.append(("segs", seg_mod.seg_key(seg_id, b"c", i // seg_mod.CHUNK), value))
    ops.append(("segs", seg_mod.seg_key(seg_id, b"f", 0),
                grams[:: seg_mod.CHUNK].astype("<u8").tobytes()))
    ops.append(("segs", seg_mod.seg_key(seg_id, b"b", 0), BlockedBloom.build(grams).to_bytes()))
    ops.append(("meta", b"segments", b'{"next": %d, "live": [[%d, %d]]}'
                % (seg_id + 1, seg_id, len(grams))))
    kv.write(ops)


def test_legacy_segments_are_read_and_merged_with_packed_ones(kv, monkeypatch):
    monkeypatch.setattr(seg_mod, "MERGE_FANIN", 2)
    rng = np.random.default_rng(5)
    old = _grams(rng, 3000)
    old_docnos = rng.integers(1, 50, len(old)).astype(np.uint64)
    _write_legacy_segment(kv, 1, old, old_docnos)
    index = _index(kv)
    assert index.segments[0].packing.legacy
    assert isinstance(index.segments[0].bloom, BlockedBloom)  # format 4's one-word filter
    truth = dict(zip(old.tolist(), old_docnos.tolist(), strict=True))
    assert first_holders(index, old) == truth
    new = _grams(rng, 3000)
    new = new[~np.isin(new, old)]
    _add(index, kv, new, np.full(len(new), 77, dtype=np.uint64))
    truth.update(dict.fromkeys(new.tolist(), 77))
    assert index.compact(withdrawn=set()) == 1
    (merged,) = index.segments
    assert not merged.packing.legacy and merged.packing.docno_bytes == 8
    assert isinstance(merged.bloom, SplitBlockBloom)
    everything = np.unique(np.concatenate((old, new)))
    assert first_holders(index, everything) == truth
    assert first_holders(_index(kv), everything) == truth


def test_orphan_segment_from_an_interrupted_merge_is_deleted_on_open(kv):
    rng = np.random.default_rng(3)
    index = _index(kv)
    g = _grams(rng, 1000)
    _add(index, kv, g, np.ones(len(g), dtype=np.uint64))
    # a merge (or a batch) that wrote its segment but died before the manifest named it
    orphan = _grams(rng, 800)
    ops, _ = seg_mod.segment_ops(index.next_id, orphan, np.full(len(orphan), 2, dtype=np.uint64))
    kv.write(ops)
    orphan_keys = {k for k, _ in kv.items("segs")} - {k for k, _ in _segment_keys(kv, 1)}
    assert orphan_keys
    reopened = _index(kv)
    left = {k for k, _ in kv.items("segs")}
    assert not left & orphan_keys
    assert first_holders(reopened, g) == dict.fromkeys(g.tolist(), 1)
    assert first_holders(reopened, orphan) == {}
    # the next segment takes the orphan's id: its keys, written over the deletion of the
    # orphan's, are found
    again = _grams(rng, 700)
    again = again[~np.isin(again, g)]
    keys, manifest, seg = reopened.new_segment_ops(np.sort(again),
                                                  np.full(len(again), 3, dtype=np.uint64))
    assert seg.id == _segment_keys_id(orphan_keys)
    kv.write([*keys, manifest])
    reopened.installed(seg)
    assert first_holders(_index(kv), again) == dict.fromkeys(again.tolist(), 3)


def _segment_keys_id(keys: set[bytes]) -> int:
    (seg_id,) = {seg_mod._KEY.unpack(k)[0] for k in keys}
    return seg_id


def _segment_keys(kv, seg_id: int):
    return [(k, v) for k, v in kv.items("segs") if seg_mod._KEY.unpack(k)[0] == seg_id]


def test_generations_stay_bounded_and_say_when_they_forgot():
    cache = Generations(8)
    for k in range(3):
        cache.put(k, (k,))
    assert not cache.dropped
    into: dict = {}
    assert cache.get_many([0, 1, 2, 9], into) == [9]
    assert into == {0: (0,), 1: (1,), 2: (2,)}
    for k in range(3, 20):
        cache.put(k, (k,))
        assert len(cache) <= 8
    assert cache.dropped
    assert cache.get(19) == (19,) and cache.get(0) is None


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(corpus=any_corpus_st())
def test_tiny_store_caches_change_nothing(corpus, monkeypatch_module):
    """Documents and overlay postings forgotten between batches are read back from the
    KV (and the overlay is read again once the postings cache forgot something)."""
    records, params, batches = corpus
    monkeypatch_module.setattr(MemoryBudget, "postings", property(lambda self: 4))
    monkeypatch_module.setattr(MemoryBudget, "doc_slots", property(lambda self: 4))
    monkeypatch_module.setattr(recent_mod, "CAPACITY", 4)
    assert_same_rows(reference(records, params), memory_pipeline(records, params, batches))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(corpus=any_corpus_st())
def test_merging_in_tiny_slices_changes_nothing(corpus, monkeypatch_module):
    """Segments of 4-pair chunks merged two at a time, two chunks per slice: the engine's
    rows still equal the reference's."""
    records, params, batches = corpus
    monkeypatch_module.setattr(seg_mod, "CHUNK", 4)
    monkeypatch_module.setattr(seg_mod, "MERGE_FANIN", 2)
    monkeypatch_module.setattr(seg_mod, "TIER_FLOOR", 8)
    monkeypatch_module.setattr(seg_mod, "MERGE_SLICE", 8)
    monkeypatch_module.setattr(recent_mod, "CAPACITY", 2)  # nearly every batch a segment
    assert_same_rows(reference(records, params), memory_pipeline(records, params, batches))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(corpus=any_corpus_st())
def test_segments_with_mapped_files_change_nothing(corpus, monkeypatch_module):
    """Every segment in its file (state.segment_files), in chunks of 4 pairs, its filter
    read in windows of two filter blocks, merged, with a reopen after every batch: the
    rows still equal the reference's."""
    records, params, batches = corpus
    monkeypatch_module.setattr(seg_mod, "MAPPED_PAIRS", 1)
    monkeypatch_module.setattr(seg_mod, "CHUNK", 4)
    monkeypatch_module.setattr(seg_mod, "WINDOW_BYTES", 64)
    monkeypatch_module.setattr(seg_mod, "MERGE_FANIN", 2)
    monkeypatch_module.setattr(seg_mod, "TIER_FLOOR", 8)
    monkeypatch_module.setattr(recent_mod, "CAPACITY", 2)
    assert_same_rows(reference(records, params),
                     rocks_reopen_pipeline(records, params, batches))
