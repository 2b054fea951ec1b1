"""engine.site_shard on its own: which documents a batch of shares and parts changes, and
the stamps that keep messages sent again, or overtaken, from changing anything."""

from __future__ import annotations

import pytest

from streamdet.engine.params import Params
from streamdet.engine.site_shard import SitePart, SiteShard, share_rows
from streamdet.engine.sites import contribution_key
from streamdet.state.kv import MemoryKV
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store


class Watched(SiteShard):
    """Records the documents each batch computes figures for, with their causes."""

    def __init__(self, params: Params, shards: int) -> None:
        super().__init__(params, shards)
        self.batches: list[dict[int, str]] = []

    def _figures(self, txn, changed):
        self.batches.append(dict(changed))
        return super()._figures(txn, changed)


@pytest.fixture(params=["memory", "rocksdb"])
def store(request, tmp_path):
    kv = MemoryKV() if request.param == "memory" else RocksKV(str(tmp_path / "s"))
    s = Store(kv)
    yield s
    s.close()


def _batch(store: Store, site: SiteShard, shares=(), parts=(), cause: str = "") -> list[dict]:
    """One batch: a shares message (its rows and its cause), then the parts."""
    txn = store.begin()
    events = site.process(txn, [(share_rows(list(shares)), cause)], list(parts),
                          lambda last: last + 1)
    txn.commit()
    return events


def _fraction(store: Store, docno: int) -> int | None:
    """The patch fraction (units of 2^-32) the site totals hold for a document."""
    raw = store.begin().sites.get(contribution_key(docno))
    return None if raw is None else int.from_bytes(raw[8:16], "little")


def _part(docno: int, stamp: int, n_patch: int, cause: str = "") -> SitePart:
    return SitePart(docno, stamp, f"http://a.example/{docno}", n_patch, 8, False, cause)


def test_a_part_or_share_that_says_what_is_kept_changes_no_document(store):
    site = Watched(Params(), 2)
    _batch(store, site, [(7, 0, 5, True, 3, 0, 0)], [_part(7, 10, 4, "http://c/1")])
    assert site.batches == [{7: "http://c/1"}]
    assert _fraction(store, 7) == (4 << 32) // 8
    # the same part and share again, newer: stamps renewed, no figures computed
    assert _batch(store, site, [(7, 0, 9, True, 3, 0, 0)],
                  [_part(7, 30, 4, "http://c/2")]) == []
    assert len(site.batches) == 1
    # what is new changes the document, whichever message says it
    _batch(store, site, [(7, 1, 31, True, 2, 0, 0)], [])
    assert site.batches[-1] == {7: ""}
    _batch(store, site, [], [_part(7, 40, 6, "http://c/3")])
    assert site.batches[-1] == {7: "http://c/3"} and _fraction(store, 7) == (6 << 32) // 8


def test_a_renewed_stamp_keeps_an_older_part_out(store):
    site = Watched(Params(), 2)
    _batch(store, site, [], [_part(7, 10, 4)])
    _batch(store, site, [], [_part(7, 30, 4)])  # says the same: the stamp is renewed
    _batch(store, site, [], [_part(7, 20, 1)])  # older than the kept one: passed over
    assert _fraction(store, 7) == (4 << 32) // 8
    assert len(site.batches) == 1


def test_an_unchanged_part_still_names_the_cause_of_a_share_moved_beside_it(store):
    site = Watched(Params(), 2)
    _batch(store, site, [(7, 0, 5, True, 3, 0, 0)], [_part(7, 10, 4, "http://c/1")])
    _batch(store, site, [(7, 0, 12, True, 5, 0, 0)], [_part(7, 12, 4, "http://c/2")])
    assert site.batches[-1] == {7: "http://c/2"}


def test_a_share_moved_alone_names_the_page_that_moved_it(store):
    """A document whose share moved, its part unchanged, names the page whose arrival
    moved it (the share message's cause), not itself: it may have come long before."""
    site = Watched(Params(), 2)
    _batch(store, site, [(7, 0, 5, True, 3, 0, 0)], [_part(7, 10, 4, "http://c/1")])
    _batch(store, site, [(7, 0, 12, True, 5, 0, 0)], cause="http://late/9")
    assert site.batches[-1] == {7: "http://late/9"}
    _batch(store, site, [(7, 1, 13, True, 2, 0, 0)], [_part(7, 14, 4, "http://c/2")],
           cause="http://late/10")  # the part names the cause of its own re-score
    assert site.batches[-1] == {7: "http://c/2"}


def test_a_replaced_versions_tombstone_is_kept_once(store):
    site = Watched(Params(), 2)
    _batch(store, site, [], [_part(7, 10, 4)])
    _batch(store, site, [], [SitePart(7, 20, "", cause="http://new")])
    assert site.batches[-1] == {7: "http://new"} and _fraction(store, 7) is None
    _batch(store, site, [], [SitePart(7, 25, "", cause="http://new")])  # sent again
    _batch(store, site, [], [_part(7, 15, 4)])  # the old version's, overtaken
    assert len(site.batches) == 2 and _fraction(store, 7) is None
