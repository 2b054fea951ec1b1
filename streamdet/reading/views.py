"""Read-only views of a state for scripts: `dump` rows (documents, partial-duplicate
pairs and clusters), sites and neighbourhoods, pop(d) and contains' counts (`explain`
and `text` are reading/explain.py; finding the shards of worker states, reading/states.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice

from ..engine.badness import ranked_neighbourhoods
from ..engine.chunks import Chunks
from ..engine.clusters import Cluster, ClusterRole
from ..engine.doc_role import current
from ..engine.evidence import evidence
from ..engine.keyed import key_u64, prefix_end
from ..engine.labelled import share
from ..engine.params import Params
from ..engine.partials import PartialRole, decode_partners
from ..engine.routing import docno_shard
from ..engine.sites import LEVELS, SHARED, Totals, site_rows
from ..state.schema import decode_url_entry
from ..state.txn import Store


def _params(store: Store, params: Params | None) -> Params:
    if params is not None:
        return params
    recorded = store.meta("params")
    if recorded is None:
        raise ValueError("the state records no parameters: pass them")
    return Params.from_fingerprint(recorded)


def pop_counts(stores: Iterable[Store]) -> dict[int, int] | None:
    """pop(d) of every document with popular grams (SPEC §8), summed over the states that
    count them: a `streamdet run` state, or every gram shard of a Kafka pipeline (each
    counts the grams it owns, engine.popular). None when one of them was not counting
    from its start (a state upgraded from before format 10: its figures are short)."""
    out: dict[int, int] = {}
    for store in stores:
        if store.meta("popular") == "partial":
            return None
        for key, raw in _prefixed(store, "popular", b"d"):
            d = key_u64(key[1:])
            out[d] = out.get(d, 0) + int.from_bytes(raw, "little", signed=True)
    return out


def pop_of(stores: Iterable[Store], docno: int) -> int | None:
    """pop(d) of one version, summed over the states that count it (pop_counts)."""
    total = 0
    for store in stores:
        if store.meta("popular") == "partial":
            return None
        total += store.begin().pop_many([docno])[0]
    return total


def contains_counts(stores: Iterable[Store]) -> dict[int, tuple[int, int]]:
    """(occurrences in L, occurrences) of the chunks of every document that was counted
    (SPEC §8's contains(L, f), engine.labelled), summed over the states that count them:
    a `streamdet run` state, or every gram shard of a Kafka pipeline (each counts the
    chunks it owns). A document missing was never counted (a state from before chunks)."""
    out: dict[int, tuple[int, int]] = {}
    for store in stores:
        for key, raw in _prefixed(store, "chunks", b"d"):
            d = key_u64(key[1:])
            inside, total = out.get(d, (0, 0))
            out[d] = (inside, total + Chunks.decode(raw).total())
        for key, raw in _prefixed(store, "chunks", b"l"):
            d = key_u64(key[1:])
            inside, total = out.get(d, (0, 0))
            out[d] = (inside + int.from_bytes(raw, "little"), total)
    return out


def contains_of(stores: Iterable[Store], docno: int) -> tuple[int, int] | None:
    """contains' counts of one version (contains_counts), None when never counted."""
    found = [share(store.begin(), docno) for store in stores]
    counted = [f for f in found if f is not None]
    if not counted:
        return None
    return sum(f[0] for f in counted), sum(f[1] for f in counted)


def contains_figure(counts: tuple[int, int] | None) -> float | None:
    """contains(L, f) as `dump` and `explain` show it (0 when f has no chunk)."""
    if counts is None:
        return None
    inside, total = counts
    return inside / total if total else 0.0


def _prefixed(store: Store, table: str, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    return store.kv.items_between(table, prefix, prefix_end(prefix))


def _totals(store: Store, min_pages: int = 1) -> Iterator[tuple[bytes, bytes]]:
    """A `streamdet run` state's hosts' and domains' totals records (engine.sites), read
    by prefix (not the per-document records; those of one page only if `min_pages` < 2)."""
    for prefix in LEVELS if min_pages < 2 else SHARED.values():
        yield from _prefixed(store, "sites", prefix)


def sites_of(store: Store, params: Params | None = None, min_pages: int = 1,
             **select) -> list[dict]:
    """SPEC §8's `sites` rows of a `streamdet run` state (of `min_pages` pages or more;
    `select`: engine.sites.site_rows' levels, monsters and top)."""
    return site_rows(_totals(store, min_pages), _params(store, params), min_pages, **select)


def neighbourhoods_of(store: Store, min_docs: int = 1, bad: bool = False,
                      top: int | None = None) -> list[dict]:
    """SPEC §8's neighbourhood rows of a `streamdet run` state (of `min_docs` documents or
    more), by badness; only the bad ones if `bad`, only the first `top` (read alone)."""
    return list(islice(ranked_neighbourhoods(store.begin(), min_docs, bad), top))


def monster_counts(store: Store) -> dict[str, int]:
    """How many hosts and domains the last `site` events showed as monster candidates."""
    out = dict.fromkeys(LEVELS.values(), 0)
    for key, raw in _totals(store, _params(store, None).monster_pages):
        out[LEVELS[key[:1]]] += Totals.decode(raw).shown
    return out


def text_reader(docs: list[Store]) -> Callable[[int], bytes | None]:
    """A version's kept text, read from whichever state keeps it: the one `run` state,
    or the doc shard its docno names (`docs` in shard order)."""
    txns = [store.begin() for store in docs]
    if len(txns) == 1:
        return txns[0].text
    return lambda docno: txns[docno_shard(docno, len(txns))].text(docno)


def live_docnos(stores: Iterable[Store]) -> Iterator[int]:
    """The live document versions of states that keep URLs (a `run` state, doc shards)."""
    for store in stores:
        for _, raw in store.kv.items("urls"):
            yield decode_url_entry(raw)[0]


READ_AHEAD = 256  # URL entries whose documents dump_rows reads together


def dump_rows(store: Store, params: Params | None = None, near: Store | None = None,
              clustered: bool = True, pops: Mapping[int, int] | None | bool = True,
              contains: Mapping[int, tuple[int, int]] | None | bool = True,
              spans: bool = True) -> Iterator[dict]:
    """One row per live document, sorted by URL (code-point order = UTF-8 byte order);
    `params` default to those the state records. The clusters (SPEC §6) are read from
    `near`, a Kafka pipeline's cluster shard, if given (a doc shard has none); without
    `clustered` they are not known (null). pop(d) (SPEC §8) comes from `pops`
    (pop_counts of a pipeline's gram shards; None: not known), by default from the
    state itself; so does contains(L, f) from `contains` (contains_counts of the gram
    shards; None: not known). Without `spans` the sources' spans are None: a reader of
    the figures alone (the spam ranking) skips decoding every text."""
    params = _params(store, params)
    if pops is True:
        pops = pop_counts([store])
    if contains is True:
        contains = contains_counts([store])
    txn = store.begin()
    near_txn = txn if near is None else near.begin()
    clusters: dict[int, tuple[str, int]] = {}  # decoded once, however many members
    for key, raw in _read_ahead(txn, store.kv.items("urls")):
        docno, _seq = decode_url_entry(raw)
        doc = txn.doc(docno)
        r = current(txn, doc)
        url = key.decode("utf-8")
        cluster, size, twins = (ClusterRole.row(near_txn, docno, url, clusters)
                                if clustered else (None, None, None))
        yield {
            "url": url,
            "n_grams": doc.n_grams,
            "n_patch_grams": doc.n_patch,
            "patch_fraction": doc.patch_fraction,
            "sources": evidence(r, doc, txn.text(docno) if spans else None, params.k),
            "quilted": r.quilted,
            "pop": None if pops is None else pops.get(docno, 0),
            "contains": None if contains is None else contains_figure(contains.get(docno)),
            "cluster": cluster,
            "cluster_size": size,
            "exact_dups": twins,
        }


def _read_ahead(txn, entries: Iterable[tuple[bytes, bytes]]
                ) -> Iterator[tuple[bytes, bytes]]:
    """The URL entries as given, their documents read READ_AHEAD at a time with one
    multi-get per table (Txn.load_docs) before they are asked for one by one: a point get
    costs a call and a lookup of its own, which a dump of every document pays per table."""
    it = iter(entries)
    while chunk := list(islice(it, READ_AHEAD)):
        txn.load_docs(decode_url_entry(raw)[0] for _, raw in chunk)
        yield from chunk


def cluster_rows(store: Store) -> list[dict]:
    """SPEC §6: one row per cluster of two or more live documents, largest first (then by
    id): {"cluster", "size", "members"} with the members' URLs sorted. `store` is a
    `streamdet run` state or a Kafka pipeline's cluster shard (engine.clusters, records
    `c<number>`)."""
    txn = store.begin()
    rows = []
    for key, raw in store.kv.items("near", b"c"):
        if not key.startswith(b"c"):
            break
        c = Cluster.decode(raw)
        if c.together:
            urls = sorted((txn.url_of(d) for d in c.members), key=lambda u: u.encode("utf-8"))
            rows.append({"cluster": c.id, "size": len(urls), "members": urls})
    rows.sort(key=lambda r: (-r["size"], r["cluster"].encode("utf-8")))
    return rows


def _partner_records(store: Store) -> Iterator[tuple[int, dict]]:
    """(owner docno, its partners' rows) of every partner record of the state: the pairs
    it keeps (engine.partials, records `p<docno>`)."""
    for key, raw in store.kv.items("partials", b"p"):
        if not key.startswith(b"p"):
            break
        yield key_u64(key[1:]), decode_partners(raw)


def partial_rows(store: Store, params: Params | None = None) -> list[dict]:
    """SPEC §7: one row per partial-duplicate pair, sorted by (url, other), each kept by
    the document with the smaller URL (engine.partials)."""
    role = PartialRole(_params(store, params))
    txn = store.begin()
    rows = []
    for docno, partners in _partner_records(store):
        url = txn.url_of(docno)
        for other, diags in role.pairs(txn, docno, partners).items():
            rows.append({"url": url, "other": other, "diagonals": diags})
    rows.sort(key=_pair_order)
    return rows


def partial_pairs(store: Store, params: Params | None = None) -> list[dict]:
    """The pairs of partial_rows as {"url", "other"}, without their diagonals: what a
    reader of who is paired with whom needs (the spam ranking), at a fraction of the cost
    (PartialRole.paired)."""
    role = PartialRole(_params(store, params))
    txn = store.begin()
    rows = [{"url": txn.url_of(docno), "other": other}
            for docno, partners in _partner_records(store)
            for other in role.paired(txn, docno, partners)]
    rows.sort(key=_pair_order)
    return rows


def _pair_order(row: dict) -> tuple[bytes, bytes]:
    return row["url"].encode("utf-8"), row["other"].encode("utf-8")


def pairs_of(store: Store, docno: int, params: Params | None = None) -> list[dict]:
    """The partial-duplicate pairs of document version `docno` that this state keeps
    (its own, as the smaller URL, and those of its partners here), from its side:
    {"other", "diagonals"} with "spans" in its text. On worker states each doc shard
    keeps the pairs of its own documents: ask every one."""
    role = PartialRole(_params(store, params))
    txn = store.begin()
    out = []
    for owner, partners in _partner_records(store):
        if owner == docno:
            out += [{"other": o, "diagonals": d}
                    for o, d in role.pairs(txn, owner, partners).items()]
        elif docno in partners:
            for diags in role.pairs(txn, owner, {docno: partners[docno]}).values():
                out.append({"other": txn.url_of(owner), "diagonals": [
                    {"spans": d["other_spans"], "other_spans": d["spans"],
                     "sentences": d["sentences"]} for d in diags]})
    return out
