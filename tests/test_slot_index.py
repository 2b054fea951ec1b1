"""The gram -> slot index against a plain dict, over random gains, losses and merges."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.engine import slot_index
from streamdet.engine.documents import DocState
from streamdet.engine.slot_index import SlotIndex

# grams from both ends of the uint64 range, few enough to repeat
GRAMS = st.one_of(st.integers(0, 40), st.integers(2**64 - 40, 2**64 - 1))
OPS = st.lists(st.tuples(st.sampled_from(["add", "add_sorted", "remove", "rebuild"]),
                         st.lists(GRAMS, max_size=12, unique=True)), max_size=60)


@pytest.fixture(scope="module")
def small_merges():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(slot_index, "MERGE_AFTER", 3)  # merge often: both paths are used
        yield


@settings(max_examples=300, deadline=None)
@given(OPS, st.lists(GRAMS, max_size=30))
def test_the_index_answers_as_a_dict_does(small_merges, ops, probes):
    slots: array = array("Q")
    free: list[int] = []
    model: dict[int, int] = {}
    index = SlotIndex(slots, free)
    for op, grams in ops:
        if op in ("add", "add_sorted"):
            new = [g for g in grams if g not in model]
            at = []
            for g in new:
                i = free.pop() if free else len(slots)
                if i == len(slots):
                    slots.append(g)
                else:
                    slots[i] = g
                at.append(i)
                model[g] = i
            if op == "add":
                index.add(new, at)
            else:  # in one go, ascending (DocState._append)
                order = sorted(range(len(new)), key=new.__getitem__)
                index.add_sorted(np.array([new[k] for k in order], dtype=np.uint64),
                                 np.array([at[k] for k in order], dtype=np.int32))
        elif op == "remove":
            freed = index.remove(grams)
            assert sorted(freed) == sorted(model.pop(g) for g in grams if g in model)
            free.extend(freed)
        else:  # built again from the slots and the free list
            index = SlotIndex(slots, free)
        assert len(index) == len(model)
        assert sorted(index.grams()) == sorted(model)
        asked = probes + list(model)
        assert index.find(asked).tolist() == [model.get(g, -1) for g in asked]
        assert index.present(asked).tolist() == [model[g] for g in asked if g in model]


def test_a_gain_repeated_or_with_duplicates_changes_nothing(small_merges):
    d = DocState(50)
    assert d.gain([7, 9, 7, 2**64 - 1]).tolist() == [0, 1, 0, 2]  # every gram's slot
    assert list(d.slots) == [7, 9, 2**64 - 1]
    assert d.gain([9, 2**64 - 1, 11]).tolist() == [1, 2, 3]
    assert list(d.slots) == [7, 9, 2**64 - 1, 11]
    d.lose([9])
    at = d.gain([12, 7])  # the freed slot is reused; 7 stays where it is
    assert at.tolist() == [1, 0]
    assert list(d.slots) == [7, 12, 2**64 - 1, 11]
    assert d.slots_of([7, 12, 9, 11]).tolist() == [0, 1, 3]  # 9 is no patch gram now
    d.fold()
    assert d.slots_of([7, 12, 9, 11]).tolist() == [0, 1, 3]  # rebuilt from the slots


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["gain", "lose"]), st.lists(GRAMS, max_size=12)),
                max_size=20))
def test_gains_take_the_slots_a_gram_at_a_time_would(small_merges, ops):
    """DocState.gain places the grams of a document with no free slot all at once
    (`_append`); its slots are those the one-gram-at-a-time rule gives: the lowest free
    slot, else a new one, a gram named twice taking one."""
    doc, slots, free = DocState(1), [], []
    for op, grams in ops:
        if op == "lose":
            doc.lose(grams)
            for g in grams:
                free.extend(i for i, s in enumerate(slots) if s == g and i not in free)
            continue
        at = doc.gain(grams)
        for k, g in enumerate(grams):
            live = [i for i, s in enumerate(slots) if s == g and i not in free]
            if not live:
                if free:
                    i = min(free)
                    free.remove(i)
                    slots[i] = g
                else:
                    slots.append(g)
                    i = len(slots) - 1
                live = [i]
            assert at[k] == live[0]
        assert doc.slots.tolist() == slots
        assert sorted(doc.free) == sorted(free)
