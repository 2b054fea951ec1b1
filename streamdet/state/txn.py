"""The typed, buffered transaction the engine works through for one batch.

Reads go through a write-back cache (like quixstreams' partition transaction): the engine
sees its own uncommitted writes, and `commit` turns everything - postings, documents,
names, URL entries, withdrawn versions, docno counter and the input position - into one atomic
KV write. Nothing reaches the store before commit, so a crash mid-batch leaves the state as
of the previous commit, and the batch is replayed from the stored position.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator
from functools import cached_property

import numpy as np

from ..engine.documents import DocState, Posting, add_record, add_records, new_addition
from ..engine.keyed import key_u64, u64key, u64keys
from .bloom import Probe
from .budget import MemoryBudget
from .cache import Generations
from .doc_cache import DocCache
from .gram_table import GramTable
from .keyed import KeyedTable
from .kv import KV, DeleteRange, Op
from .posting_cache import PostingCache
from .posting_map import PostingMap
from .recent import RecentPairs
from .schema import (
    decode_doc,
    decode_name,
    decode_posting,
    decode_stale,
    decode_url_entry,
    encode_doc_delta,
    encode_doc_packing,
    encode_name,
    encode_posting,
    encode_slots,
    encode_stale,
    encode_url_entry,
)
from .segment_files import SegmentFileLost, SegmentFiles
from .segments import Admitted, SegmentIndex

_MISSING = object()
SEGMENT_FILES = "segments"  # directory of a RocksDB state's segment files (state.segment_files)


class StateError(RuntimeError):
    """The state is unusable (built by another version or with other parameters)."""


class Store:
    """A state on a KV backend: meta data and the withdrawn set, plus new transactions."""

    def __init__(self, kv: KV, budget: MemoryBudget | None = None) -> None:
        self.kv = kv
        # the KV's own budget when it has one (RocksKV): one figure sizes both
        self.budget = budget = budget or getattr(kv, "budget", None) or MemoryBudget()
        self.withdrawn: set[int] = {key_u64(k) for k, _ in kv.items("dead")}
        # Decoded documents as of the last commit. A transaction takes (pops) what it reads
        # and gives everything back on commit, so an abandoned transaction can never leave
        # uncommitted changes here.
        self.doc_cache = DocCache()
        # Overlay postings as of the last commit. The grams pages share (menus, boilerplate,
        # replicated passages) come back batch after batch, and their postings only change
        # through commits, which update this cache with the same values they write.
        self.postings = PostingCache(budget.postings)
        # Names of document versions as of the last commit. A docno's name never changes
        # (a re-fetch gets a new docno) and goes only when the version is withdrawn, so
        # the cache needs no invalidation but that; every greedy cover reads the URL of
        # each source (SPEC's tie-break), ~45 reads a page that hit RocksDB each batch.
        self.names = Generations(budget.names)
        # A reader never trusts the cache (nothing writes through it); finding the first
        # gram would open every file of the gram table
        self._overlay_was_empty = (not getattr(kv, "read_only", False)
                                   and next(kv.items("grams"), None) is None)

    @cached_property
    def segments(self) -> SegmentIndex:
        """The gram index's segments, loaded on first use: their filters and fences take
        seconds to load at 500 k documents, which a reader of the other tables (`sites`,
        `text`, `explain`) need not wait for."""
        path = getattr(self.kv, "path", None)  # a RocksDB state's directory
        files = None if path is None else SegmentFiles(
            os.path.join(path, SEGMENT_FILES), writable=not getattr(self.kv, "read_only", False))
        return SegmentIndex(self.kv, files)

    @cached_property
    def recent(self) -> RecentPairs:
        """The gram index's recent pairs, loaded on first use (as `segments`)."""
        return RecentPairs(self.kv)

    @property
    def overlay_cached(self) -> bool:
        """Whether the postings cache holds the whole overlay, so that a gram it lacks has
        no overlay entry: true while it has seen every overlay write since the overlay
        was empty (a new state) and has forgotten none."""
        return self._overlay_was_empty and not self.postings.dropped

    def meta(self, name: str) -> str | None:
        v = self.kv.get("meta", name.encode())
        return None if v is None else v.decode("utf-8")

    def set_meta(self, name: str, value: str) -> None:
        self.kv.write([("meta", name.encode(), value.encode("utf-8"))])

    def positions(self) -> dict[str, int]:
        text = self.meta("positions")
        return json.loads(text) if text else {}

    def take_doc(self, docno: int) -> DocState | None:
        return self.doc_cache.take(docno)

    @property
    def cached_slots(self) -> int:
        return self.doc_cache.weight

    def shrink_cache(self, slots: int) -> None:
        """Make the cached documents weigh at most `slots` (a transaction needs the room):
        the least recently used are folded, then forgotten (state.doc_cache)."""
        self.doc_cache.shrink(slots)

    def keep_docs(self, docs: dict[int, DocState | None]) -> None:
        """Keep a committed transaction's documents decoded, within the budget's
        document share."""
        for docno, d in docs.items():
            if d is not None:
                self.doc_cache.put(docno, d)
        self.shrink_cache(self.budget.doc_slots)

    @property
    def first_holder_pairs(self) -> int:
        """Grams ever held, one (gram, first holder) pair each: in segments or recent."""
        return self.segments.pairs + self.recent.n

    def begin(self) -> Txn:
        return Txn(self)

    def compact(self) -> int:
        """Merge crowded segment tiers (between batches, never inside one)."""
        return self.segments.compact(self.withdrawn)

    def segments_whole(self) -> bool:
        """Whether every live segment's file is there and whole, where it holds the
        segment's pairs (they are loaded now, rather than on the first lookup)."""
        try:
            self.segments  # noqa: B018 - loading them is the check
        except SegmentFileLost:
            return False
        return True

    def close(self) -> None:
        self.kv.close()


class Txn:
    """Cached reads and buffered writes over a Store, committed atomically."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.kv = store.kv
        # The postings the batch knows (state.posting_map): every gram read or written
        # (posting None: no document holds it), and, by their ids there, those written.
        self._known = PostingMap()
        self._dirty = GramTable()
        self.docs: dict[int, DocState | None] = {}
        self.dirty_docs: set[int] = set()
        # pending additions of stale documents left unread (defer_add), by docno, in the
        # layout DocState.adds keeps; and stale documents' marks read (stale_unread)
        self.deferred: dict[int, bytearray] = {}
        self._marks: dict[int, tuple[int, int]] = {}
        self._legacy_adds: set[int] = set()  # documents whose additions were one record
        # Documents handed out whose gram -> slot index may be built, oldest first, with
        # the slots each was counted at: with the store's cached documents they stay
        # within the budget's document share, the oldest folded (DocState.fold) past it.
        # A batch changes every earlier document that shares a gram with its pages, a
        # number that grows with the state: their indexes must not grow with it.
        self._unfolded: dict[int, int] = {}
        self._unfolded_slots = 0
        self.names: dict[int, tuple[str, str] | None] = {}
        self.new_names: dict[int, tuple[str, str]] = {}
        self.urls: dict[str, tuple[int, int] | None] = {}
        self.dirty_urls: set[str] = set()
        self.new_withdrawn: set[int] = set()
        self.doc_gram_sets: dict[int, np.ndarray | None] = {}
        self.texts: dict[int, bytes | None] = {}  # packed visible texts written, per docno
        # The detectors' tables, read and written through the transaction as KeyedTables
        # (get, get_many, put, scan, ...): their kinds of record told apart by a prefix byte.
        # partials: sentence-key postings, a document's sentences, its partners' matching
        # sentences, what a URL's pair events last showed (SPEC §7, engine.partials)
        self.partials = KeyedTable(self.kv, "partials")
        self.near = KeyedTable(self.kv, "near")  # SPEC §6 (engine.clusters)
        self.tallies = KeyedTable(self.kv, "popular")  # SPEC §8 (engine.popular)
        self.sites = KeyedTable(self.kv, "sites")  # SPEC §8 (engine.sites, engine.badness)
        # SPEC §8 (engine.labelled): a chunk's holders are scanned by their 9-byte prefix
        self.chunks = KeyedTable(self.kv, "chunks", group=9, grouped=b"p")
        self.meta_puts: dict[str, bytes | None] = {}
        self.early: dict[bytes, bytes | None] = {}  # changed early deltas and waiting adds
        self.fresh: list[tuple[np.ndarray, int]] = []
        self._next_docno: int | None = None
        self._held: int | None = None  # messages ever held early (hold_early), once read
        self._as_delta: set[int] = set()  # documents written as a delta (commit)
        self._segment = None
        self._logged: tuple[np.ndarray, np.ndarray] | None = None
        self._flushed = False
        self._prefetched = False

    # -- gram index -------------------------------------------------------------------
    # A gram's posting is its overlay entry (table `grams`) when it has one, else the
    # holder its first-holder pair names. Every gram ever seen has such a pair, in a
    # segment or among the recent pairs, so a gram that no segment's Bloom filter and not
    # the recent pairs' admits was never seen and needs no read at all.

    def prefetch(self, grams: np.ndarray) -> np.ndarray:
        """Load the postings of a batch's grams (sorted, distinct); True where a gram has
        one. Once per transaction: fresh grams of this batch are not in any segment yet."""
        if self._prefetched:
            raise RuntimeError("one batch per transaction: prefetch was already called")
        self._prefetched = True
        held = np.zeros(len(grams), dtype=bool)
        if not len(grams):
            return held
        admitted = self.store.segments.maybe(Probe(grams))
        maybe = np.flatnonzero(admitted.any | self.store.recent.maybe(grams))
        self._resolve(grams[maybe], admitted)
        held[maybe] = self._known.ids(grams[maybe]) > 0
        return held

    def _resolve(self, grams: np.ndarray, admitted: Admitted | None = None) -> None:
        """Overlay first (the store's cache of it, then the KV), then the recent pairs,
        then segments, for grams the transaction does not know yet. `admitted`: the
        segments' filters' answers for these grams, when the caller has them."""
        known = self._known
        parts, rest = self.store.postings.find(grams[known.ids(grams) < 0])
        for part in parts:
            known.assign_from(*part)
        if len(rest) and not self.store.overlay_cached:
            rest = self._read_overlay(rest)
        if len(rest):
            held, holders, left = self.store.recent.find(rest)
            self._learn_first_holders(held, holders)
            if len(left):
                self._learn_first_holders(*self.store.segments.find_pairs(left, admitted))

    def _read_overlay(self, grams: np.ndarray) -> np.ndarray:
        """Read grams' overlay entries from the KV; return the grams that have none."""
        raws = self.kv.get_many("grams", u64keys(grams))
        held = np.fromiter((raw is not None for raw in raws), dtype=bool, count=len(raws))
        if held.any():
            postings = [decode_posting(raw) for raw in raws if raw is not None]
            which = np.arange(len(postings))
            self._known.assign_from(grams[held], postings, which)
            # committed values: valid in the store's cache now
            self.store.postings.put(grams[held], postings, which)
        return grams[~held]

    def _learn_first_holders(self, grams: np.ndarray, holders: np.ndarray) -> None:
        """Grams whose only holder is their first (a first-holder pair, no overlay
        entry): one posting a distinct holder."""
        if len(grams):
            distinct, which = np.unique(holders, return_inverse=True)
            self._known.assign_from(grams, [(h,) for h in distinct.tolist()], which)

    def prefetched(self, grams: np.ndarray) -> np.ndarray:
        """Posting ids of prefetched grams (int32; `posting_of` gives the posting, 0 is
        None: no document holds the gram)."""
        ids = self._known.ids(grams)
        ids[ids < 0] = 0
        return ids

    def posting_of(self, posting_id: int) -> Posting | None:
        return self._known.postings[posting_id]

    def postings(self, grams: np.ndarray) -> list[Posting | None]:
        """Posting of each gram, prefetched or not."""
        known = self._known
        missing = grams[known.ids(grams) < 0]
        if len(missing):
            self._resolve(missing)
            known.assign(missing[known.ids(missing) < 0], None)
        return [known.postings[i] for i in known.ids(grams).tolist()]

    def add_fresh(self, grams: np.ndarray, docno: int, remember: np.ndarray) -> None:
        """Grams no document held: `docno` is their first holder (a segment pair). Those a
        later page of the batch repeats (`remember`) are also known to the transaction."""
        if not len(grams):
            return
        self._known.assign(grams[remember], (docno,))
        self.fresh.append((grams, docno))

    def set_postings(self, grams: np.ndarray, posting: Posting) -> None:
        """The same posting for many grams (uint64)."""
        self._dirty.assign(grams, self._known.assign(grams, posting))

    def live(self, posting: tuple[int, ...]) -> tuple[int, ...]:
        """The holders of a posting that are not withdrawn versions."""
        withdrawn, new = self.store.withdrawn, self.new_withdrawn
        if withdrawn.isdisjoint(posting) and (not new or new.isdisjoint(posting)):
            return posting
        return tuple(x for x in posting if x not in withdrawn and x not in new)

    def kill(self, docno: int) -> None:
        self.new_withdrawn.add(docno)

    def is_withdrawn(self, docno: int) -> bool:
        return docno in self.new_withdrawn or docno in self.store.withdrawn

    # -- documents ----------------------------------------------------------------------
    def doc(self, docno: int) -> DocState | None:
        d = self.docs.get(docno, _MISSING)
        if d is _MISSING:
            d = self._with_deferred(docno, self.store.take_doc(docno))
            if d is None:
                key = u64key(docno)
                raw = self.kv.get("docs", key)
                d = None if raw is None else self._decoded(
                    docno, raw, *(self.kv.get(t, key) for t in ("slots", "docdelta")))
            self.docs[docno] = d
        if d is not None:
            self._unfold(docno, d.weight)
        return d

    def load_docs(self, docnos: Iterable[int]) -> None:
        """Read the documents of `docnos` that neither this transaction nor the store's
        cache holds with one multi-get per table, before a loop that asks `doc` for each
        (a RocksDB get costs a call and a lookup of its own; a multi-get shares them)."""
        docs, store = self.docs, self.store
        missing = []
        for d in dict.fromkeys(docnos):
            if d not in docs:
                cached = self._with_deferred(d, store.take_doc(d))
                if cached is None:
                    missing.append(d)
                else:
                    docs[d] = cached
        if not missing:
            return
        keys = u64keys(missing)
        raws, *parts = (self.kv.get_many(t, keys) for t in ("docs", "slots", "docdelta"))
        for d, raw, *more in zip(missing, raws, *parts, strict=True):
            docs[d] = None if raw is None else self._decoded(d, raw, *more)

    def _decoded(self, docno: int, raw: bytes, slots: bytes | None, delta: bytes | None
                 ) -> DocState:
        """A stored document, with its pending additions: the stored records (a stale
        document's only: no other has any) and those this transaction gave it unread."""
        d = decode_doc(raw, slots, delta)
        if d.result.stale:
            stored, legacy = bytearray(), b""
            for key, value in self.kv.items_between("docadds", u64key(docno),
                                                    u64key(docno + 1)):
                if len(key) == 8:  # a state's older layout: all of them in one record,
                    legacy = value  # written again as records by this commit
                    self._legacy_adds.add(docno)
                    self.dirty_docs.add(docno)
                else:
                    stored += add_record(key_u64(key[8:16]), value)
            d.adds, d.adds_stored = stored, len(stored)
            if legacy:
                d.take_adds(legacy)
        return self._with_deferred(docno, d)

    def _with_deferred(self, docno: int, d: DocState | None) -> DocState | None:
        """A document the transaction now holds (read, or taken from the store's cache),
        with the pending additions it was given unread (defer_add): they are its own now,
        and written with it, whether or not anything else changes it."""
        if d is not None and (given := self.deferred.pop(docno, None)) is not None:
            d.take_adds(given)
            self.dirty_docs.add(docno)
        return d

    def stale_unread(self, docnos: Iterable[int]) -> set[int]:
        """Of these documents, the stale ones that neither this transaction nor the
        store's cache holds (their stored mark says so: table `stale`): they take pending
        additions unread (defer_add). Cached ones are taken in (they are read already)."""
        unread, missing = set(), []
        for d in docnos:
            if d in self.docs:
                continue
            if d in self.deferred or d in self._marks:
                unread.add(d)
            elif (cached := self.store.take_doc(d)) is not None:
                self.docs[d] = cached
            else:
                missing.append(d)
        self._read_marks(missing)
        return unread | {d for d in missing if d in self._marks}

    def _read_marks(self, docnos: list[int]) -> None:
        """The stale marks of these documents (none: not stale, or stored unmarked), in
        one multi-get, kept for the transaction: a document not held changes only
        through it."""
        if docnos:
            for d, raw in zip(docnos, self.kv.get_many("stale", u64keys(docnos)),
                              strict=True):
                if raw is not None:
                    self._marks[d] = decode_stale(raw)

    def defer_add(self, docno: int, source: int, grams: list[int]) -> None:
        """A pending addition (DocState.defer_add) to a stale document left unread: kept
        here, stored as a record of its own by commit, given to the document if read."""
        if len(grams):
            self.deferred.setdefault(docno, bytearray()).extend(new_addition(source, grams))

    def figures(self, docnos: list[int]) -> list[tuple[int, int, bool]]:
        """(patch grams, grams, quilted) of live documents: as those held stand, else
        as their stale marks say (a stale result is not quilted), else read."""
        self._read_marks([d for d in docnos if d not in self.docs and d not in self._marks])
        out = []
        for d in docnos:
            mark = None if d in self.docs else self._marks.get(d)
            if mark is None:
                doc = self.doc(d)
                out.append((doc.n_patch, doc.n_grams, doc.result.quilted))
            else:
                out.append((*mark, False))
        return out

    def held_slots(self) -> int:
        """Slots of the documents this transaction holds (DocState.held_weight): what its
        memory grows with as the state grows (adapters.batch_sizer)."""
        return sum(d.held_weight for d in self.docs.values() if d is not None)

    def _unfold(self, docno: int, n_slots: int) -> None:
        """Count a document handed out as unfolded (its caller may build its index); past
        the budget, make room: the store's cached documents go first (they are stored as
        they are), then this transaction's least recently handed out are folded."""
        unfolded = self._unfolded
        self._unfolded_slots += n_slots - unfolded.pop(docno, 0)
        unfolded[docno] = n_slots
        store = self.store
        limit = store.budget.doc_slots
        if self._unfolded_slots + store.cached_slots <= limit:
            return
        store.shrink_cache(max(0, limit - self._unfolded_slots))
        if self._unfolded_slots <= limit:
            return
        goal = limit * 3 // 4  # fold a quarter at once, not one document per call
        docs = self.docs
        for d in list(unfolded):
            if self._unfolded_slots <= goal or d == docno:
                break
            self._unfolded_slots -= unfolded.pop(d)
            if (held := docs.get(d)) is not None:
                held.fold()

    def doc_grams(self, docno: int) -> np.ndarray:
        """All grams of a document version (kept by doc shards, to withdraw them)."""
        g = self.doc_gram_sets.get(docno, _MISSING)
        if g is _MISSING:
            raw = self.kv.get("docgrams", u64key(docno))
            g = None if raw is None else np.frombuffer(raw, dtype="<u8").astype(np.uint64)
        return np.zeros(0, dtype=np.uint64) if g is None else g

    def put_doc_grams(self, docno: int, grams: np.ndarray | None) -> None:
        self.doc_gram_sets[docno] = grams

    def text(self, docno: int) -> bytes | None:
        """A live document version's packed visible text (engine.text.pack_text); None
        where none was kept (a state written before texts were)."""
        t = self.texts.get(docno, _MISSING)
        if t is _MISSING:
            return self.kv.get("texts", u64key(docno))
        return t

    def put_text(self, docno: int, packed: bytes | None) -> None:
        self.texts[docno] = packed or None

    # -- popular phrases (SPEC §8): common grams' tallies (engine.popular) ----------------

    # Two kinds of record, told apart by a prefix byte: a common gram's tally (b"t"),
    # a document's pop(d) as counted here (b"d", absent: 0).

    def tally_many(self, grams: list[int]) -> list[bytes | None]:
        return self.tallies.get_many([b"t" + u64key(g) for g in grams])

    def put_tally(self, gram: int, raw: bytes) -> None:
        self.tallies.put(b"t" + u64key(gram), raw)

    def pop_many(self, docnos: list[int]) -> list[int]:
        raws = self.tallies.get_many([b"d" + u64key(d) for d in docnos])
        return [0 if raw is None else int.from_bytes(raw, "little", signed=True)
                for raw in raws]

    def put_pop(self, docno: int, pop: int | None) -> None:
        """pop(d) counted here (None or 0: the record goes). Signed: in a state upgraded
        from before format 10 a document counted from 0 may lose popular grams it was
        never counted for (its figures are marked short and not shown, views.pop_counts)."""
        self.tallies.put(b"d" + u64key(docno),
                         pop.to_bytes(8, "little", signed=True) if pop else None)

    def pop_changed(self) -> list[int]:
        """The documents whose pop(d) this transaction changed."""
        return [key_u64(k[1:]) for k in self.tallies.dirty if k.startswith(b"d")]

    def newest_version(self) -> int:
        """The greatest live docno (0: none). In a doc shard that is the last page
        applied: pages are applied in offset order, docnos grow with the offset, and a
        version goes only when a newer version of its URL replaces it. A state written
        before the doc shards stopped keeping versions' grams knows it by those too."""
        keys = (self.kv.last_key(t) for t in ("docs", "docgrams"))
        return max([0, *(key_u64(k) for k in keys if k is not None),
                    *(d for d, doc in self.docs.items() if doc is not None)])

    def put_doc(self, docno: int, doc: DocState | None) -> None:
        self.docs[docno] = doc
        self.dirty_docs.add(docno)
        self.deferred.pop(docno, None)
        if doc is not None:
            doc.modified = True
            self._unfold(docno, doc.weight)

    def touch_doc(self, docno: int) -> None:
        """Mark a cached document as changed in place."""
        self.dirty_docs.add(docno)

    def name(self, docno: int) -> tuple[str, str] | None:
        """(server, url) of a document version."""
        n = self.names.get(docno, _MISSING)
        if n is _MISSING:
            n = self.store.names.get(docno)
            if n is None:
                raw = self.kv.get("names", u64key(docno))
                if raw is not None:
                    n = decode_name(raw)
                    self.store.names.put(docno, n)  # a committed value
            self.names[docno] = n
        return n

    def load_names(self, docnos: Iterable[int]) -> None:
        """Read the names of `docnos` that neither this transaction nor the store's cache
        holds with one multi-get, before a loop that asks `name`, `server` or `url_of`
        for each (a cover's tie-break needs every candidate source's URL)."""
        names = self.names
        missing = [d for d in dict.fromkeys(docnos) if d not in names]
        if missing:
            missing = self.store.names.get_many(missing, names)
        if not missing:
            return
        keys = u64keys(missing)
        found = {}
        for d, raw in zip(missing, self.kv.get_many("names", keys), strict=True):
            names[d] = n = None if raw is None else decode_name(raw)
            if n is not None:
                found[d] = n
        self.store.names.update(found)  # committed values

    def server(self, docno: int) -> str:
        """Server of a document version."""
        n = self.names.get(docno)
        return n[0] if n is not None else self.name(docno)[0]

    def url_of(self, docno: int) -> str:
        """URL of a document version."""
        n = self.names.get(docno)
        return n[1] if n is not None else self.name(docno)[1]

    def put_name(self, docno: int, server: str, url: str) -> None:
        self.names[docno] = (server, url)
        self.new_names[docno] = (server, url)

    def url_entry(self, url: str) -> tuple[int, int] | None:
        """(docno, seq) of a URL's current version."""
        e = self.urls.get(url, _MISSING)
        if e is _MISSING:
            raw = self.kv.get("urls", url.encode("utf-8"))
            e = None if raw is None else decode_url_entry(raw)
            self.urls[url] = e
        return e

    def put_url(self, url: str, docno: int, seq: int) -> None:
        self.urls[url] = (docno, seq)
        self.dirty_urls.add(url)

    def allocate_docno(self) -> int:
        if self._next_docno is None:
            self._next_docno = int(self.store.meta("next_docno") or 1)
        n = self._next_docno
        self._next_docno += 1
        return n

    # -- early deltas (doc shards) --------------------------------------------------------
    # Deltas about a document whose page the doc shard has not applied yet: a new owner
    # resuming from the group's offsets can meet them before that page (see engine.shards).
    # Each held message is a key of its own, (target, stamp), so holding one costs its own
    # bytes, not a rewrite of everything held for the target before it (SPEC §9).

    def hold_early(self, docno: int, raw: bytes) -> None:
        """Hold an encoded message for version `docno`, after those held before it: its
        stamp is the number of messages the shard ever held (meta `held`), so a batch done
        again after a crash holds its messages under the same keys."""
        if self._held is None:
            self._held = int(self.store.meta("held") or 0)
        self.early[u64key(docno) + u64key(self._held)] = raw
        self._held += 1

    def early_up_to(self, docno: int) -> list[tuple[bytes, int, bytes]]:
        """Held messages (key, target, encoded) of every version up to `docno`, in target
        order, each target's in the order they were held."""
        found = {}
        for key, raw in self.kv.items("early"):
            if key_u64(key[:8]) > docno:
                break
            found[key] = raw
        for key, raw in self.early.items():
            if key_u64(key[:8]) <= docno:
                found[key] = raw
        return [(key, key_u64(key[:8]), raw) for key, raw in sorted(found.items())
                if raw is not None]

    def release_early(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self.early[key] = None

    # A gram shard keeps in the same column an add that waits for the withdrawal of the
    # older version of its URL, keyed by that version (see engine.shards.GramShard).

    def waiting_add(self, docno: int) -> bytes | None:
        """The encoded add waiting for version `docno`'s withdrawal."""
        key = u64key(docno)
        if key in self.early:
            return self.early[key]
        return self.kv.get("early", key)

    def put_waiting_add(self, docno: int, raw: bytes | None) -> None:
        self.early[u64key(docno)] = raw

    def put_meta(self, name: str, value: bytes | None) -> None:
        """A meta value written with the rest (e.g. a shard's outbox); None deletes it."""
        self.meta_puts[name] = value

    # -- commit -------------------------------------------------------------------------
    def _buffered_ops(self, written: tuple[np.ndarray, np.ndarray],
                      positions: dict[str, int] | None = None) -> Iterator[Op]:
        """Every buffered change but the first-holder pairs as KV operations, made one
        table at a time as they are written: a batch's ~200,000 operations are never all
        held as Python objects beside the write batch they go into. `written`: the
        postings written, (grams, posting ids)."""
        grams, ids = written
        if len(grams):
            yield from zip(itertools.repeat("grams"), u64keys(grams), self._encoded(ids))
        for docno in sorted(self.dirty_docs):
            yield from self._doc_ops(docno, self.docs[docno], self._as_delta,
                                     docno in self._legacy_adds)
        for docno in sorted(self.deferred):
            yield from _add_puts(docno, self.deferred[docno])
        for docno, grams in self.doc_gram_sets.items():
            yield ("docgrams", u64key(docno),
                   None if grams is None else np.asarray(grams, dtype="<u8").tobytes())
        for docno, packed in self.texts.items():
            yield ("texts", u64key(docno), packed)
        for table in (self.partials, self.near, self.tallies, self.sites, self.chunks):
            yield from table.ops()
        for docno, (server, url) in self.new_names.items():
            yield ("names", u64key(docno), encode_name(server, url))
        for docno in self.new_withdrawn:
            yield ("dead", u64key(docno), b"")  # the table keeps its on-disk name
            yield ("names", u64key(docno), None)
        for url in sorted(self.dirty_urls):
            e = self.urls[url]
            yield ("urls", url.encode("utf-8"), None if e is None else encode_url_entry(*e))
        if self._next_docno is not None:
            yield ("meta", b"next_docno", str(self._next_docno).encode())
        if self._held is not None:
            yield ("meta", b"held", str(self._held).encode())
        for key, raw in self.early.items():
            yield ("early", key, raw)
        for name, value in self.meta_puts.items():
            yield ("meta", name.encode(), value)
        if positions is not None:
            yield ("meta", b"positions", json.dumps(positions, sort_keys=True).encode())

    def _encoded(self, ids: np.ndarray) -> list[bytes]:
        """The bytes of these postings, each distinct one encoded once: the grams of a
        passage share one (Txn.set_postings)."""
        postings = self._known.postings
        done = {i: encode_posting(postings[i]) for i in np.unique(ids).tolist()}
        return list(map(done.__getitem__, ids.tolist()))

    def _fresh_ops(self) -> list[Op]:
        """The batch's new first-holder pairs: logged among the recent pairs while they
        fit; else written, with the recent pairs, as a segment (a big batch's pairs make
        a segment at once, as the recent pairs are then few or none)."""
        grams = np.concatenate([g for g, _ in self.fresh])
        docnos = np.concatenate([np.full(len(g), d, dtype=np.uint64) for g, d in self.fresh])
        recent = self.store.recent
        if recent.fits(len(grams)):
            self._logged = (grams, docnos)
            return recent.log_ops(grams, docnos)
        ops: list[Op] = []
        if recent.n:
            ops, old_grams, old_docnos = recent.flush_ops()
            grams = np.concatenate((old_grams, grams))
            docnos = np.concatenate((old_docnos, docnos))
            self._flushed = True
        keys, manifest, self._segment = self.store.segments.new_segment_ops(grams, docnos)
        return ops + keys + [manifest]

    @staticmethod
    def _doc_ops(docno: int, d: DocState | None, as_delta: set[int], legacy: bool
                 ) -> list[Op]:
        """A changed document's writes: its delta while that stays small (its docno goes
        into `as_delta`), else a new snapshot (and the delta deleted); its slots when they
        changed; its stale mark; its pending additions' records when they changed
        (`legacy`: the older layout's one record goes). A document that only gained
        pending additions is not rewritten."""
        key = u64key(docno)
        if d is None:
            return [("docs", key, None), ("slots", key, None), ("docdelta", key, None),
                    ("docadds", key, DeleteRange(u64key(docno + 1))), ("stale", key, None)]
        ops: list[Op] = [("docadds", key, None)] if legacy else []
        mark = ("stale", key, encode_stale(d.n_patch, d.n_grams) if d.result.stale else None)
        if d.adds_changed:  # marked as well: one stored unmarked (format 15) is read
            ops += [("docadds", _add_key(docno, source, grams), None)  # until marked
                    for source, grams in add_records(d.adds_gone)]
            ops += _add_puts(docno, d.adds[d.adds_stored:])
            if not d.modified:
                ops.append(mark)
        if not d.modified:
            return ops
        delta = d.delta_pairs()
        if delta is not None:
            as_delta.add(docno)
            ops.append(("docdelta", key, encode_doc_delta(d, *delta)))
        else:
            ops.append(("docs", key, encode_doc_packing(d)))  # its pairs then wait packed
            if d.has_delta:
                ops.append(("docdelta", key, None))
        if d.slots_changed:
            ops.append(("slots", key, encode_slots(d)))
        ops.append(mark)
        return ops

    def commit(self, positions: dict[str, int] | None = None) -> None:
        """Write everything, with the input positions, in one atomic write."""
        fresh = self._fresh_ops() if self.fresh else []  # makes any new segment
        grams, ids = written = self._dirty.contents()  # sorted once, for both uses
        self.kv.write(itertools.chain(fresh, self._buffered_ops(written, positions)))
        if len(grams):
            self.store.postings.put(grams, self._known.postings, ids)
        for docno in self.dirty_docs:
            if (d := self.docs[docno]) is not None:  # stored now
                d.adds_saved()
                if not d.modified:
                    continue
                d.modified = d.slots_changed = False
                d.has_delta = docno in self._as_delta
                if not d.has_delta:
                    d.unsaved = set()
        self.store.withdrawn |= self.new_withdrawn
        self.store.names.update(self.new_names)
        for docno in self.new_withdrawn:
            self.store.names.discard(docno)
        self.store.keep_docs(self.docs)
        if self._segment is not None:
            self.store.segments.installed(self._segment)
        if self._flushed:
            self.store.recent.flushed()
        if self._logged is not None:
            self.store.recent.logged(*self._logged)


def _add_key(docno: int, source: int, grams: bytes) -> bytes:
    """A pending addition's key: its document, its source and its first gram (the lists
    a source gives a document have no gram in common, and the same list given twice is
    the same record)."""
    return u64key(docno) + u64key(source) + grams[:8]


def _add_puts(docno: int, raw: bytes | bytearray) -> Iterator[Op]:
    """Pending additions (DocState.adds layout) as records of table `docadds`."""
    for source, grams in add_records(raw):
        yield ("docadds", _add_key(docno, source, grams), grams)
