"""`streamdet similar`: what a state would make of a page, without adding it (Broder's
on-the-fly query; what a crawler asks before it stores a page).

The page goes through the engine exactly as an arrival would, on a transaction that is
never committed: its near-duplicates (SPEC §6) with their estimated resemblance, the
cluster it would join, and its patch fraction and cover (SPEC §1, §5) against the
documents the state holds now. A URL the state holds is asked about with its kept text,
as a re-fetch of itself: its near-duplicates are the other pages.
"""

from __future__ import annotations

from ..engine.analysis import analyze
from ..engine.clusters import ClusterRole
from ..engine.core import Engine
from ..engine.docs import current
from ..engine.evidence import evidence
from ..engine.params import Params
from ..engine.records import Page
from ..state.txn import Store
from .explain import NEAR_SHOWN, near_rows

QUERY_URL = "http://query.streamdet.invalid/"  # a page given by its text: a server of its own


def similar(store: Store, page: Page, params: Params) -> dict:
    """The near-duplicates, would-be cluster and cover of `page` against `store` (which is
    left as it was: nothing is committed)."""
    arrival = analyze(page, params)
    txn = store.begin()
    Engine(params).process(txn, [arrival])
    docno, _ = txn.url_entry(arrival.url)
    doc = txn.doc(docno)
    result = current(txn, doc)
    near = (ClusterRole.near_of(txn, arrival.sketch, exclude=docno)
            if arrival.sketch is not None else [])
    cluster, size, twins = ClusterRole.row(txn, docno, arrival.url)
    if arrival.url == QUERY_URL and size > 1:  # a page of no URL names no cluster
        cluster = min(txn.url_of(d) for d in ClusterRole.members(txn, docno) if d != docno)
    return {
        "url": arrival.url,
        "near": near_rows(txn, near),
        "near_total": len(near),
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
