"""What a state directory was written as, and the one check every opener makes.

A state records its format, the parameters it was built with and, for a worker shard,
the pipeline's shard count. An opener refuses a format this version cannot read, other
parameters or another shard count. A format it reads as it is (an upgradable one) is
marked with the current one at once: from then on the state may hold what an older
version would misread (stale covers, packed segments, split-block filters: see
state.schema, state.segments, state.bloom).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.params import Params
from ..state.txn import StateError, Store


@dataclass(frozen=True)
class StateFormat:
    current: str
    upgradable: tuple[str, ...]
    kind: str  # what a state of this format is, for messages
    uncounted: tuple[str, ...] = ()  # upgradable formats that did not count popular phrases
    unchunked: tuple[str, ...] = ()  # upgradable formats that kept no paragraph chunks


# 4 may hold stale covers, 5 packs segment pairs, 6 gives new segments split-block filters,
# 7 keeps documents' visible texts (table texts; documents from before have none), 8 their
# sentences and partial-duplicate pairs (table partials; documents from before have none),
# 9 near-duplicate sketches and clusters (table near; documents from before have none),
# 10 popular phrases' counts and pop(d) (table popular; a state from before does not count
# them: meta `popular` says "partial" once it is upgraded, views.pop_counts), 11 paragraph
# chunks, the labelled set and neighbourhoods (table chunks, records v/n/B/g of table
# sites; documents from before have no chunks: meta `chunks` says "partial"), 12 keeps big
# segments' filters and fences in segment files (state.segment_files; a state from before
# has them moved there when it is first opened for writing), 13 cuts sentences with runs of
# repeats as one and keys on more than m of a page's positions as NO_KEY (SPEC §9; an older
# version would post NO_KEY; documents from before keep the sentences they were cut into),
# 14 writes a document's sources as slot lists (engine.paircodec), which an older version
# would read as bitmasks (documents from before are read as bitmasks until rewritten),
# 15 keeps a stale document's new sources as pending additions (table docadds), which an
# older version would not see, 16 keeps them a record each and marks stale documents
# (table stale; documents from before are unmarked, read before they take additions,
# and their additions' one record is read and written again as records), 17 keeps a big
# segment's pairs in its segment file alone (state.segment_files; an older version would
# find no chunks; segments from before keep theirs in the KV until merged)
_OLD = ("3", "4", "5", "6", "7", "8", "9")
EMBEDDED = StateFormat("17", (*_OLD, "10", "11", "12", "13", "14", "15", "16"),
                       "a `streamdet run` state",
                       _OLD, (*_OLD, "10"))
# shards-3 to shards-16: the same fourteen steps; shards-1 gram shards had no URL tables
_OLD_SHARDS = ("shards-2", "shards-3", "shards-4", "shards-5", "shards-6", "shards-7",
               "shards-8")
SHARD = StateFormat("shards-16", (*_OLD_SHARDS, "shards-9", "shards-10", "shards-11",
                                  "shards-12", "shards-13", "shards-14", "shards-15"),
                    "a worker shard",
                    _OLD_SHARDS, (*_OLD_SHARDS, "shards-9"))


def check_state(store: Store, fmt: StateFormat, params: Params, where: str,
                shards: int | None = None) -> None:
    """Refuse a state this version cannot take as `fmt` with `params` (and `shards`);
    a new one is marked with them. Raises StateError (ParamsError for parameters)."""
    found, stored = store.meta("format"), store.meta("params")
    if stored is None:  # new, or a first run stopped before its first batch
        store.set_meta("format", fmt.current)
        store.set_meta("params", params.fingerprint())
        if shards is not None:
            store.set_meta("shards", str(shards))
        return
    if found is not None and found != fmt.current and found not in fmt.upgradable:
        raise StateError(f"{where} has format {found}, which this version does not read "
                         f"(it writes {fmt.current}, {fmt.kind})")
    params.check_same(Params.from_fingerprint(stored), where)
    if shards is not None and store.meta("shards") != str(shards):
        raise StateError(f"{where} was built for {store.meta('shards')} shards, not {shards}")
    if found != fmt.current:
        if found is None or found in fmt.uncounted:  # SPEC §8's counts would be short
            store.set_meta("popular", "partial")
        if found is None or found in fmt.unchunked:  # so would its neighbourhoods
            store.set_meta("chunks", "partial")
        store.set_meta("format", fmt.current)
