"""Segment files (state.segment_files): a big segment's pairs, filter and fences live in
a file mapped only while a lookup reads it; a lost file that held the pairs is refused
with a clear error, one that held only the filter and fences (a state written before) is
rebuilt from the chunks; a state from before has them moved out of the KV; the file goes
with its segment, and a lookup leaves at most one window of it resident."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streamdet.state import segment_files as seg_files
from streamdet.state import segments as seg_mod
from streamdet.state.rocks import RocksKV
from streamdet.state.segment_files import SegmentFileLost, SegmentFiles
from streamdet.state.segments import SPLIT_FILTER, SegmentIndex, seg_key

from .harness import first_holders


def _grams(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64))


@pytest.fixture
def state(tmp_path):
    kv = RocksKV(str(tmp_path / "db"))
    yield kv, SegmentFiles(str(tmp_path / "db" / "segments"), writable=True)
    kv.close()


def _add(index: SegmentIndex, kv, grams: np.ndarray, docno: int) -> None:
    keys, manifest, seg = index.new_segment_ops(grams, np.full(len(grams), docno,
                                                               dtype=np.uint64))
    kv.write([*keys, manifest])
    index.installed(seg)


def _filled(kv, files, rng, sizes=(5000, 7000, 3000)):
    index = SegmentIndex(kv, files)
    truth: dict[int, int] = {}
    for docno, n in enumerate(sizes, start=1):
        g = _grams(rng, n)
        g = g[~np.isin(g, np.fromiter(truth, dtype=np.uint64, count=len(truth)))]
        truth.update(dict.fromkeys(g.tolist(), docno))
        _add(index, kv, g, docno)
    return index, truth


def test_big_segments_live_in_files_not_in_the_kv(state, monkeypatch):
    kv, files = state
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 4000)
    index, truth = _filled(kv, files, np.random.default_rng(1))
    mapped = {s.id for s in index.segments if s.parts is not None}
    assert mapped == {1, 2}  # 5,000 and 7,000 pairs; the 3,000-pair one stays in the KV
    assert sorted(os.listdir(files.directory)) == [os.path.basename(files.path(i))
                                                   for i in (1, 2)]
    in_kv = {seg_mod._KEY.unpack(k)[0] for k, _ in kv.items("segs")}
    assert in_kv == {3}  # no key at all of 1 and 2: their pairs are in their files
    assert all(s.in_file == (s.id != 3) for s in index.segments)
    assert kv.get("segs", seg_key(3, SPLIT_FILTER, 0)) is not None
    assert index.ram_bytes < index.mapped_bytes
    everything = np.fromiter(truth, dtype=np.uint64)
    assert first_holders(index, np.sort(everything)) == truth
    assert first_holders(SegmentIndex(kv, files), everything[::-1].copy()) == truth  # unsorted too


@pytest.mark.parametrize("damage", ["lost", "cut short"])
def test_a_lost_file_that_held_its_pairs_is_refused_with_a_clear_error(state, monkeypatch,
                                                                       damage):
    kv, files = state
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
    _filled(kv, files, np.random.default_rng(6))
    if damage == "lost":
        os.unlink(files.path(2))
    else:
        with open(files.path(2), "r+b") as f:
            f.truncate(os.path.getsize(files.path(2)) - 8)
    with pytest.raises(SegmentFileLost, match="segment 2's file .* rebuild the state"):
        SegmentIndex(kv, files)
    with pytest.raises(SegmentFileLost, match="without its files"):
        SegmentIndex(kv, None)


def test_a_lost_file_of_a_segment_from_before_is_rebuilt_from_the_chunks(state, monkeypatch):
    kv, files = state
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
    _, truth = _filled(kv, None, np.random.default_rng(2))  # pairs in the KV, as before
    index = SegmentIndex(kv, files)  # their filters and fences move to files
    assert all(s.parts is not None and not s.in_file for s in index.segments)
    before = open(files.path(2), "rb").read()
    os.unlink(files.path(2))
    with open(files.path(3), "r+b") as f:  # a damaged one (cut short) too
        f.truncate(os.path.getsize(files.path(3)) - 8)
    again = SegmentIndex(kv, files)
    assert first_holders(again, np.fromiter(truth, dtype=np.uint64)) == truth
    assert open(files.path(2), "rb").read() == before  # the same bytes, fences and all


def test_files_of_the_layout_from_before_pairs_moved_into_them_are_read(state, monkeypatch):
    """A file of magic SDSEGF01 (filter and fences, a shorter header; its segment's pairs
    chunks in the KV) is read as it is, and rebuilt no differently."""
    kv, files = state
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
    _, truth = _filled(kv, None, np.random.default_rng(8))
    SegmentIndex(kv, files)  # filters and fences move to files without pairs
    for seg_id in (1, 2, 3):
        with open(files.path(seg_id), "r+b") as f:
            header = f.read(seg_files._HEADER.size)
            magic, words, fences, pairs, room, pair_bytes = seg_files._HEADER.unpack(header)
            assert (magic, room, pair_bytes) == (seg_files.MAGIC, 0, 0)
            f.seek(0)
            f.write(seg_files._OLD_HEADER.pack(b"SDSEGF01", words, fences, pairs) + bytes(16))
    index = SegmentIndex(kv, files)
    assert all(s.parts is not None and not s.in_file for s in index.segments)
    assert first_holders(index, np.fromiter(truth, dtype=np.uint64)) == truth


def test_filters_of_a_state_from_before_move_to_files_on_a_writable_open(state, monkeypatch):
    kv, files = state
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
    index, truth = _filled(kv, None, np.random.default_rng(3))  # no files: all in the KV
    assert all(s.parts is None for s in index.segments)
    assert not os.path.exists(files.directory) or not os.listdir(files.directory)
    moved = SegmentIndex(kv, files)
    assert all(s.parts is not None for s in moved.segments)
    assert [k for k, _ in kv.items("segs") if k[4:5] != b"c"] == []  # chunks alone stay
    assert first_holders(moved, np.fromiter(truth, dtype=np.uint64)) == truth


def test_merges_remove_the_files_of_merged_segments_and_orphans_go_on_open(state, monkeypatch):
    kv, files = state
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
    monkeypatch.setattr(seg_mod, "MERGE_FANIN", 2)
    monkeypatch.setattr(seg_mod, "TIER_FLOOR", 8)
    index, truth = _filled(kv, files, np.random.default_rng(4), sizes=(3000, 3000, 3000, 3000))
    assert index.compact(withdrawn=set()) >= 1
    live = {s.id for s in index.segments}
    assert {int(n.split(".")[0]) for n in os.listdir(files.directory)} == live
    # a crash between a file's writing and its manifest: an orphan, and a .tmp half-written
    open(files.path(99), "wb").write(b"x" * 100)
    open(files.path(98) + ".tmp", "wb").write(b"y")
    reopened = SegmentIndex(kv, files)
    assert {int(n.split(".")[0]) for n in os.listdir(files.directory)} == live
    assert first_holders(reopened, np.fromiter(truth, dtype=np.uint64)) == truth


HUGE_PAGE = 2 << 20  # the largest page a file mapping may be mapped in, here (x86-64)


def _resident_bytes(path: str) -> int:
    """Rss of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and not line.startswith(("Rss", "Size")):
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                total += int(head[1]) * 1024
    return total


def test_a_lookup_leaves_at_most_one_window_of_a_filter_resident(state, monkeypatch):
    kv, files = state
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
    monkeypatch.setattr(seg_mod, "WINDOW_BYTES", 1 << 20)
    rng = np.random.default_rng(5)
    index = SegmentIndex(kv, files)
    g = _grams(rng, 2_000_000)  # a 6 MB filter, 250 KB of fences
    _add(index, kv, g, 7)
    seg = index.segments[0]
    assert seg.bloom.nbytes >= 5 << 20
    probe = np.sort(np.concatenate([g[::3], _grams(rng, 500_000)]))
    hit = index.maybe(seg_mod.Probe(probe)).any
    assert hit[np.isin(probe, g)].all()
    assert _resident_bytes(files.path(seg.id)) <= (1 << 20) + 8192
    found = first_holders(index, g[::1000])
    assert found == dict.fromkeys(g[::1000].tolist(), 7)
    assert _resident_bytes(files.path(seg.id)) == 0  # find releases fences and filter


def test_a_lookup_of_many_grams_holds_at_most_one_window_of_pairs_resident(state,
                                                                           monkeypatch):
    """A batch's candidates fall on every page of a big segment's pairs: they are searched
    a window at a time, each window's pages dropped before the next."""
    kv, files = state
    monkeypatch.setattr(seg_mod, "MAPPED_PAIRS", 1)
    monkeypatch.setattr(seg_mod, "WINDOW_BYTES", 1 << 20)
    rng = np.random.default_rng(7)
    index = SegmentIndex(kv, files)
    g = _grams(rng, 2_000_000)
    _add(index, kv, g, 7)
    seg = index.segments[0]
    assert len(seg.parts.pair_data) >= 16 << 20  # 9 bytes a pair
    resident = []
    search = seg_mod._search_chunks

    def watched(s, cand, chunk_of):
        out = search(s, cand, chunk_of)
        resident.append(_resident_bytes(files.path(seg.id)))
        return out

    monkeypatch.setattr(seg_mod, "_search_chunks", watched)
    asked = rng.permutation(g[::20])  # 100,000 grams, on every page of the pairs
    assert first_holders(index, asked) == dict.fromkeys(asked.tolist(), 7)
    assert len(resident) >= 16
    # one window of pairs, and a page at either end (the kernel may map page-cache folios
    # of up to 2 MB whole), and the fences' pages; all 18 MB of pairs without windows
    assert max(resident) <= (1 << 20) + 2 * HUGE_PAGE + seg.fences.nbytes
    assert _resident_bytes(files.path(seg.id)) == 0
