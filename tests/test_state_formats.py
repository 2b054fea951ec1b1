"""State directories carry their format: a version reads its own and the ones it can
upgrade in place (marking them as its own, so an older version then refuses them), and
refuses the rest with a one-line reason."""

from __future__ import annotations

import pytest

from streamdet.adapters.embedded import STATE_FORMAT, open_store_checked
from streamdet.adapters.kafka import STATE_FORMAT as SHARD_FORMAT
from streamdet.adapters.worker import _check_state
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
    open_store_checked(store, Params())
    assert store.meta("format") == STATE_FORMAT == "6"


@pytest.mark.parametrize("old", ["3", "4", "5"])
def test_an_embedded_state_of_format_3_to_5_is_upgraded_in_place(old):
    """Formats 3 to 5 have no stale covers, no packed segments or no split-block filters:
    readable as they are, then marked 6 (an older reader would take a stale cover's flag
    for 'quilted', could not decode a packed segment, would not find a split filter)."""
    store = _store(old)
    open_store_checked(store, Params())
    assert store.meta("format") == "6"


def test_an_embedded_state_of_an_unknown_format_is_refused_untouched():
    store = _store("2")
    with pytest.raises(StateError, match="format 2 is not supported"):
        open_store_checked(store, Params())
    assert store.meta("format") == "2"


def test_an_upgradable_state_with_other_parameters_is_refused_untouched():
    store = _store("3", Params(k=4))
    with pytest.raises(Exception, match="other parameters"):
        open_store_checked(store, Params())
    assert store.meta("format") == "3"


@pytest.mark.parametrize("upgradable", ["shards-2", "shards-3", "shards-4"])
def test_a_shard_state_of_shards_2_to_4_is_upgraded_and_shards_1_refused(upgradable):
    old = _store(upgradable, shards=4)
    _check_state(old, Params(), 4, "state X")
    assert old.meta("format") == SHARD_FORMAT == "shards-5"
    older = _store("shards-1", shards=4)
    with pytest.raises(StateError, match="format shards-1, not a worker shard"):
        _check_state(older, Params(), 4, "state X")
    other = _store("shards-2", shards=3)
    with pytest.raises(StateError, match="built for 3 shards"):
        _check_state(other, Params(), 4, "state X")
    assert other.meta("format") == "shards-2"
