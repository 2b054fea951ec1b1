"""`streamdet similar`: what a state would make of a page, without adding it (Broder's
on-the-fly query; what a crawler asks before it stores a page).

The page goes through the engine exactly as an arrival would, on transactions that are
never committed: its near-duplicates (SPEC §6) with their estimated resemblance, the
cluster it would join, and its patch fraction and cover (SPEC §1, §5) against the
documents the state holds now. A URL the state holds is asked about with its kept text,
as a re-fetch of itself: its near-duplicates are the other pages.

On a `streamdet run` state that is one Engine step. On worker states it is the Kafka
pipeline's own hops (engine.shards), with every message handed over in memory: the page's
version (a docno no record can have) is added at every gram shard, after the withdrawal
of the URL's live version if the doc shard holds one, and its doc shard applies the page
and the deltas and cluster rows addressed to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import ExitStack

from ..console import UsageError
from ..engine.analysis import analyze
from ..engine.clusters import ClusterRole
from ..engine.core import Engine
from ..engine.doc_role import current
from ..engine.evidence import evidence
from ..engine.messages import DeltasMsg, GramsMsg, PageMsg
from ..engine.params import Params
from ..engine.records import Page
from ..engine.routing import docno_for, split_grams, url_shard
from ..engine.shards import CLUSTER_SHARD, DocShard, GramShard, page_adds, version_grams
from ..state.txn import Store
from .explain import NEAR_SHOWN, Missing, look_up, near_rows
from .states import opened_states

QUERY_URL = "http://query.streamdet.invalid/"  # a page given by its text: a server of its own
QUERY_OFFSET = 1 << 50  # the query's docs offset on worker states: past any record's


def similar_in(states: list[str] | None, query: Callable[..., Page]) -> tuple[dict, Params]:
    """`streamdet similar` against a `run` state or worker states: the answer for the page
    `query(*stores)` gives (the stores: the state, or the doc shards), with the state's
    parameters."""
    with ExitStack() as stack:
        found = opened_states(states, stack)
        if isinstance(found, tuple):
            docs, grams, shards = found
            params = Params.from_fingerprint(docs[0].meta("params"))
            page = query(*docs.values())
            answer = similar_sharded(docs, grams, page, params, shards)
        else:
            params = Params.from_fingerprint(found.meta("params"))
            answer = similar(found, query(found), params)
    return answer, params


def kept_page(url: str, stores: Iterable[Store]) -> Page:
    """The page of `url` as whichever of `stores` (one state, or doc shards) keeps it, to
    be asked with its kept text."""
    spellings: list[str] = []
    for store in stores:
        found = look_up(store, url)
        if isinstance(found, Missing):
            spellings += found.near
            continue
        if found.text is None:
            raise UsageError(f"the text of {found.url} was not kept (stored before texts "
                             "were)")
        return Page(found.url, text=found.text)
    raise UsageError(Missing(url.strip(), spellings).message)


def similar(store: Store, page: Page, params: Params) -> dict:
    """The near-duplicates, would-be cluster and cover of `page` against a `streamdet
    run` state (left as it was: nothing is committed)."""
    arrival = analyze(page, params)
    txn = store.begin()
    Engine(params).process(txn, [arrival])
    docno, _ = txn.url_entry(arrival.url)
    return answer(txn, txn, docno, arrival, params)


def similar_sharded(docs: dict[int, Store], grams: dict[int, Store], page: Page,
                    params: Params, shards: int) -> dict:
    """The same against worker states: every doc and gram shard of the pipeline (nothing
    is committed to any)."""
    arrival = analyze(page, params)
    s = url_shard(arrival.url, shards)
    docno = docno_for(QUERY_OFFSET, s, shards)
    msg = PageMsg(arrival.url, arrival.server, arrival.grams, None, arrival.text,
                  arrival.sentences, arrival.sketch, arrival.chunks)
    dtxn = docs[s].begin()
    entry = dtxn.url_entry(arrival.url)
    old = None if entry is None else (entry[0], version_grams(dtxn, entry[0], params.k))
    adds = dict(page_adds(msg, docno, shards))
    mine, near = [], None
    for g, store in grams.items():
        gtxn = store.begin()
        msgs = [GramsMsg("withdraw", old[0], split_grams(old[1], shards)[g], "",
                         arrival.url)] if old else []
        msgs.append(GramsMsg.decode(adds[g]))
        for target, raw in GramShard(params, g, shards).process(gtxn, msgs):
            if target == s:
                mine.append(DeltasMsg.decode(raw))
        if g == CLUSTER_SHARD:
            near = gtxn
    DocShard(params, s, shards).process(dtxn, [(QUERY_OFFSET, msg)], mine, 0)
    return answer(dtxn, near, docno, arrival, params)


def answer(txn, near, docno: int, arrival, params: Params) -> dict:
    """What `similar` says of version `docno` once it arrived on `txn` (its clusters on
    `near`: the same transaction, or the cluster shard's)."""
    doc = txn.doc(docno)
    result = current(txn, doc)
    found = (ClusterRole.near_of(near, arrival.sketch, exclude=docno)
             if arrival.sketch is not None else [])
    cluster, size, twins = ClusterRole.row(near, docno, arrival.url)
    if arrival.url == QUERY_URL and size > 1:  # a page of no URL names no cluster
        cluster = min(near.url_of(d) for d in ClusterRole.members(near, docno) if d != docno)
    return {
        "url": arrival.url,
        "near": near_rows(near, found),
        "near_total": len(found),
        "cluster": cluster,
        "cluster_size": size,
        "exact_dups": twins,
        "n_grams": doc.n_grams,
        "n_patch_grams": doc.n_patch,
        "patch_fraction": doc.patch_fraction,
        "sources": evidence(result, doc, txn.text(docno), params.k),
        "quilted": result.quilted,
    }


def similar_text(answer: dict, params: Params) -> str:
    """The answer for a person."""
    lines = [answer["url"] if answer["url"] != QUERY_URL else "the given page"]
    if not answer["near_total"]:
        lines.append("  near-duplicates: none")
    else:
        lines.append(f"  {answer['near_total']} near-duplicate(s); it would join the cluster "
                     f"{answer['cluster']} ({answer['cluster_size']} pages with it, "
                     f"{answer['exact_dups']} exact duplicate(s))")
        for n in answer["near"]:
            lines.append(f"    {n['resemblance']:.3f} estimated resemblance  {n['url']}")
        if answer["near_total"] > NEAR_SHOWN:
            lines.append(f"    ... and {answer['near_total'] - NEAR_SHOWN} more")
    verdict = "QUILTED" if answer["quilted"] else "not quilted"
    lines.append(f"  {answer['n_grams']} distinct {params.k}-grams, {answer['n_patch_grams']} "
                 f"patch grams: patch fraction {answer['patch_fraction']:.3f}; "
                 f"{len(answer['sources'])} source(s); it would be {verdict}")
    for i, s in enumerate(answer["sources"], 1):
        lines.append(f"    [{i}] {s['grams']:6d} new grams ({100 * s['share']:5.1f}% of patch) "
                     f"from {s['url']}")
    return "\n".join(lines)
