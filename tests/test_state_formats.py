"""State directories carry their format: a version reads its own and the ones it can
upgrade in place (marking them as its own, so an older version then refuses them), and
refuses the rest with a one-line reason."""

from __future__ import annotations

import pytest

from streamdet.adapters.state_format import EMBEDDED, SHARD, check_state
from streamdet.engine.params import Params
from streamdet.state.kv import MemoryKV
from streamdet.state.txn import StateError, Store

DEFAULTS = Params()


def _store(fmt: str | None, params: Params | None = DEFAULTS, shards: int | None = None
           ) -> Store:
    store = Store(MemoryKV())
    if fmt is not None:
        store.set_meta("format", fmt)
    if params is not None:
        store.set_meta("params", params.fingerprint())
    if shards is not None:
        store.set_meta("shards", str(shards))
    return store


def test_a_new_embedded_state_gets_this_format():
    store = _store(None, None)
    check_state(store, EMBEDDED, Params(), "this state directory")
    assert store.meta("format") == EMBEDDED.current == "17"
    assert store.meta("popular") is None  # counted from the start (views.pop_counts)
    assert store.meta("chunks") is None


@pytest.mark.parametrize("old", ["3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13",
                                 "14", "15", "16"])
def test_an_embedded_state_of_format_3_to_16_is_upgraded_in_place(old):
    """Formats 3 to 16 have no stale covers, no packed segments, no split-block filters,
    no kept texts, no sentences, no sketches, no popular-phrase counts, no paragraph
    chunks, no segment files, no sentences cut with repeats bounded, no slot lists, no
    pending additions or them in one record, no segment pairs in files: readable as they
    are, then marked 17 (an older reader
    would take a stale cover's flag for 'quilted', could not decode a packed segment,
    would not find a split filter, could not open a state with a table of texts, of
    partials, of near-duplicate records, of tallies or of chunks, or would find no filter
    of a segment whose filter is in its file, would post NO_KEY or would read slot lists
    as bitmasks, or would not see pending additions, or not all of them, or would find no
    chunks of a segment whose pairs are in its file). Their counts of
    popular phrases (before 10) and their neighbourhoods (before 11) are marked short."""
    store = _store(old)
    check_state(store, EMBEDDED, Params(), "this state directory")
    assert store.meta("format") == "17"
    assert store.meta("popular") == ("partial" if old not in ("10", "11", "12", "13", "14",
                                                              "15", "16") else None)
    chunked = ("11", "12", "13", "14", "15", "16")
    assert store.meta("chunks") == ("partial" if old not in chunked else None)
    check_state(store, EMBEDDED, Params(), "this state directory")  # opened again
    assert store.meta("chunks") == ("partial" if old not in chunked else None)


def test_an_embedded_state_of_an_unknown_format_is_refused_untouched():
    store = _store("2")
    with pytest.raises(StateError, match="format 2, which this version does not read"):
        check_state(store, EMBEDDED, Params(), "this state directory")
    assert store.meta("format") == "2"


def test_an_upgradable_state_with_other_parameters_is_refused_untouched():
    store = _store("3", Params(k=4))
    with pytest.raises(Exception, match="other parameters"):
        check_state(store, EMBEDDED, Params(), "this state directory")
    assert store.meta("format") == "3"


@pytest.mark.parametrize("upgradable", ["shards-2", "shards-3", "shards-4", "shards-5",
                                        "shards-6", "shards-7", "shards-8", "shards-9",
                                        "shards-10", "shards-11", "shards-12", "shards-13",
                                        "shards-14", "shards-15"])
def test_a_shard_state_of_shards_2_to_15_is_upgraded_and_shards_1_refused(upgradable):
    old = _store(upgradable, shards=4)
    check_state(old, SHARD, Params(), "state X", 4)
    assert old.meta("format") == SHARD.current == "shards-16"
    assert old.meta("popular") == ("partial" if upgradable not in (
        "shards-9", "shards-10", "shards-11", "shards-12", "shards-13", "shards-14",
        "shards-15") else None)
    assert old.meta("chunks") == ("partial" if upgradable not in (
        "shards-10", "shards-11", "shards-12", "shards-13", "shards-14", "shards-15")
        else None)
    older = _store("shards-1", shards=4)
    with pytest.raises(StateError, match="format shards-1, which this version does not read"):
        check_state(older, SHARD, Params(), "state X", 4)
    other = _store("shards-2", shards=3)
    with pytest.raises(StateError, match="built for 3 shards"):
        check_state(other, SHARD, Params(), "state X", 4)
    assert other.meta("format") == "shards-2"
