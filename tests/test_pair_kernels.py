"""engine.pair_kernels.settle against the rule it implements, on change lists long enough
to be merge-sorted (more than a run of 32): a pair's last change decides it, and a pair
made before its slot's last loss is gone. And the reader of a document's pending
additions against the records engine.documents writes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamdet.engine.pair_kernels import decode_adds, settle

from streamdet.engine.documents import add_record


def _reference(src, slot, changes, lost) -> list[tuple[int, int]]:
    loss: dict[int, int] = {}
    for slots, before in lost:
        for s in slots.tolist():
            loss[s] = max(loss.get(s, -1), before)
    last: dict[tuple[int, int], tuple[int, int]] = {}
    for when, (sources, slots, kept) in enumerate(changes):
        for i, s in enumerate(slots.tolist()):
            source = int(sources[i]) if isinstance(sources, np.ndarray) else sources
            last[(source, s)] = (kept, when)
    keys = set(zip(src.tolist(), slot.tolist(), strict=True)) | set(last)
    out = []
    for key in sorted(keys):
        if key in last:
            kept, when = last[key]
            if kept and when >= loss.get(key[1], -1):
                out.append(key)
        elif loss.get(key[1], -1) < 0:
            out.append(key)
    return out


@st.composite
def _cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sources = int(draw(st.integers(1, 6)))
    slots = int(draw(st.integers(1, 40)))
    old = {(int(rng.integers(1, sources + 1)), int(rng.integers(0, slots)))
           for _ in range(draw(st.integers(0, 80)))}
    old_sorted = sorted(old)
    src = np.array([s for s, _ in old_sorted], dtype=np.uint64)
    slot = np.array([s for _, s in old_sorted], dtype=np.int32)
    changes, lost = [], []
    for _ in range(draw(st.integers(0, 12))):
        n = int(rng.integers(1, 60))
        at = rng.integers(0, slots, n).astype(np.int32)
        if rng.random() < 0.5:
            changes.append((int(rng.integers(1, sources + 1)), at, int(rng.random() < 0.7)))
        else:
            changes.append((rng.integers(1, sources + 1, n).astype(np.uint64), at,
                            int(rng.random() < 0.7)))
        if rng.random() < 0.2:
            lost.append((rng.integers(0, slots, int(rng.integers(1, 4))).astype(np.int32),
                         len(changes)))
    return src, slot, changes, lost


@settings(max_examples=400, deadline=None)
@given(_cases())
def test_settle_keeps_each_pairs_last_change_unless_its_slot_was_lost_after(case):
    src, slot, changes, lost = case
    out_src, out_slot = settle(src, slot, changes, lost)
    assert out_src.dtype == np.uint64 and out_slot.dtype == np.int32
    assert list(zip(out_src.tolist(), out_slot.tolist(), strict=True)) == _reference(
        src, slot, changes, lost)


def test_thousands_of_changes_to_one_pair_keep_the_last():
    """Far past one run: the merges must keep equal keys in the order they were made."""
    n = 5000
    kept = np.arange(n) % 2
    changes = [(7, np.zeros(1, dtype=np.int32), int(k)) for k in kept]
    changes.append((np.full(3000, 7, dtype=np.uint64), np.arange(3000, dtype=np.int32) % 3, 0))
    changes.append((7, np.array([2], dtype=np.int32), 1))
    none64, none32 = np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int32)
    out_src, out_slot = settle(none64, none32, changes, [])
    assert out_src.tolist() == [7] and out_slot.tolist() == [2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1),
                          st.lists(st.integers(0, 2**64 - 1), max_size=20)), max_size=12))
def test_pending_additions_decode_to_one_source_a_gram(records):
    """The compiled reader of DocState's pending additions against their records, written
    as engine.documents writes them (a record with no grams included)."""
    raw = b"".join(add_record(s, np.asarray(g, dtype="<u8").tobytes()) for s, g in records)
    src, grams = decode_adds(bytearray(raw))
    assert src.tolist() == [s for s, g in records for _ in g]
    assert grams.tolist() == [x for _, g in records for x in g]


@pytest.mark.parametrize("cut", [1, 11, 13])
def test_a_pending_addition_cut_short_is_refused(cut):
    raw = add_record(5, np.arange(3, dtype="<u8").tobytes())
    with pytest.raises(ValueError, match="cut short"):
        decode_adds(raw[:-cut] if cut != 13 else raw + raw[:13])
