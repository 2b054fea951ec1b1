"""Reads across the states a command is given, a `streamdet run` state or the shards of
worker states: the rows of `dump`, `phrases` and `sites`, and one page's figures gathered from its
doc shard, its partial duplicates from every doc shard, pop(d) and contains from every
gram shard, its sites from the site shard, its cluster from the cluster shard."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

import numpy as np

from ..console import UsageError
from ..engine.badness import page_neighbourhoods
from ..engine.labelled import doc_chunks
from ..engine.params import Params
from ..engine.routing import url_shard
from ..engine.site_shard import SITE_SHARD
from ..engine.sites import page_sites
from ..engine.sorting import sorted_unique
from .explain import Missing, cluster_of, look_up
from .phrases import phrase_rows
from .states import (
    DEFAULT_STATE,
    cluster_store,
    open_store,
    opened_states,
    state_dirs,
    worker_shards,
)
from .views import (
    cluster_rows,
    contains_counts,
    contains_of,
    dump_rows,
    live_docnos,
    neighbourhoods_of,
    pairs_of,
    partial_rows,
    pop_counts,
    pop_of,
    sites_of,
    text_reader,
)


def state_rows(states: list[str] | None, partial: bool = False, partials: bool = False,
               clusters: bool = False, spans: bool = True) -> list[dict]:
    """What `streamdet dump` prints: every document's row (pop and contains from the gram
    shards of worker states), or the partial-duplicate pairs, or the clusters; rows of
    several doc shards sorted as one state's are. `partial`: worker states that lack
    some doc shards give the rows of those they hold (state_dirs). Without `spans`, the
    rows' sources carry none (the spam ranking reads none, and finding them decodes
    every text)."""
    dirs, near = state_dirs(states, partial and not clusters)
    if clusters:
        return _cluster_rows(near or dirs[0])
    rows: list[dict] = []
    kept = None if partials else cluster_store(dirs, near)
    pops, contains = ((True, True) if partials or dirs == [near] else
                      pipeline_counts(states))
    try:
        for path in dirs:
            store = open_store(path, must_exist=True, read_only=True)
            try:
                rows.extend(partial_rows(store) if partials else
                            dump_rows(store, near=kept, clustered=near is not None,
                                      pops=pops, contains=contains, spans=spans))
            finally:
                store.close()
    finally:
        if kept is not None:
            kept.close()
    order = ((lambda r: (r["url"].encode("utf-8"), r["other"].encode("utf-8")))
             if partials else (lambda r: r["url"].encode("utf-8")))
    return sorted(rows, key=order) if len(dirs) > 1 else rows


def _cluster_rows(path: str) -> list[dict]:
    """The clusters of a `run` state or of worker states' cluster shard."""
    store = open_store(path, must_exist=True, read_only=True)
    try:
        return cluster_rows(store)
    finally:
        store.close()


def state_sites(states: list[str] | None, levels: set[str], warn: Callable[[str], None],
                min_pages: int = 2, monsters: bool = False, bad: bool = False,
                top: int | None = None) -> tuple[list[dict], list[dict]]:
    """What `streamdet sites` prints, from a `run` state or worker states' site shard:
    the sites (hosts and domains of `levels`) and the neighbourhoods ("neighbourhood" in
    `levels`) of `min_pages` live pages or more; with `monsters` or `bad`, only what
    these ask for; the first `top` of each. `warn` is told of figures a state upgraded
    from an older version keeps short."""
    with ExitStack() as stack:
        found = opened_states(states, stack, tables=("meta", "sites"))
        if isinstance(found, tuple):  # worker states: the site shard keeps them
            found = found[0][SITE_SHARD]
        if found.meta("popular") == "partial":
            warn("this state was upgraded from a version that did not count popular "
                 "phrases: the pop figures are short")
        if found.meta("chunks") == "partial":
            warn("this state was upgraded from a version that did not keep paragraph "
                 "chunks: its older pages are not in the neighbourhoods")
        flagged = monsters or bad  # only what these flags ask for
        sites = ([] if flagged and not monsters or not levels - {"neighbourhood"} else
                 sites_of(found, min_pages=min_pages, levels=levels, monsters=monsters,
                          top=top))
        hoods = ([] if flagged and not bad or "neighbourhood" not in levels else
                 neighbourhoods_of(found, min_pages, bad=bad, top=top))
    return sites, hoods


def state_phrases(states: list[str] | None, top: int, warn: Callable[[str], None]
                  ) -> list[dict]:
    """What `streamdet phrases --top` prints (SPEC §8): the grams on the most live
    documents, from a `run` state or from every worker state (gram shards count them, doc
    shards keep the texts). `warn` is told of counts that a state upgraded from an older
    version keeps short."""
    with ExitStack() as stack:
        found = opened_states(states, stack)
        if isinstance(found, tuple):
            by_shard, grams, shards = found
            docs = [by_shard[s] for s in range(shards)]
            counting = [grams[g] for g in range(shards)]
        else:
            counting = docs = [found]
        params = Params.from_fingerprint(docs[0].meta("params"))
        if any(s.meta("popular") == "partial" for s in counting):
            warn("this state was upgraded from a version that did not count popular "
                 "phrases: the counts are short")
        return phrase_rows(counting, text_reader(docs), lambda: live_docnos(docs), top,
                           params)


def pipeline_sites(states: list[str] | None, url: str) -> tuple[list[dict], list[dict]]:
    """A page's host, domain and neighbourhoods with their figures, from the site shard
    of worker states (doc shard 0, engine.site_shard; none when it is not among them)."""
    found = worker_shards(states or [DEFAULT_STATE])
    if found is None or SITE_SHARD not in found[0]:
        return [], []
    store = open_store(found[0][SITE_SHARD], must_exist=True, read_only=True)
    try:
        txn = store.begin()
        params = Params.from_fingerprint(store.meta("params"))
        return page_sites(txn, url, params), page_neighbourhoods(txn, url)
    finally:
        store.close()


def pipeline_counts(states: list[str] | None, docno: int | None = None):
    """SPEC §8's per-page counts of worker states' documents (of `docno` alone, if given),
    summed over every gram shard: (pop(d), contains' counts), each None when some gram
    shard is not among the states."""
    found = worker_shards(states or [DEFAULT_STATE])
    if found is None:
        return None, None
    _, grams, shards = found
    if len(grams) < shards:
        return None, None
    stores = [open_store(grams[g], must_exist=True, read_only=True) for g in range(shards)]
    try:
        if docno is None:
            return pop_counts(stores), contains_counts(stores)
        return pop_of(stores, docno), contains_of(stores, docno)
    finally:
        for store in stores:
            store.close()


def find_page(states: list[str] | None, url: str, with_pairs: bool = False):
    """The page of `url` in the given state(s) (for worker states, in whichever doc
    shard holds it), or its absence with every spelling of it that one of them holds;
    `with_pairs`: with its partial duplicates, gathered from every doc shard, and its
    cluster, from the cluster shard."""
    spellings: list[str] = []
    dirs, near = state_dirs(states)
    for path in dirs:
        store = open_store(path, must_exist=True, read_only=True)
        try:
            found = look_up(store, url)
        finally:
            store.close()
        if isinstance(found, Missing):
            spellings += found.near
            continue
        for other in dirs if with_pairs else ():
            store = open_store(other, must_exist=True, read_only=True)
            try:
                found.pairs += pairs_of(store, found.docno, found.params)
            finally:
                store.close()
        found.pairs.sort(key=lambda p: p["other"].encode("utf-8"))
        if near is not None and dirs != [near]:  # worker states: the gram shards count pop
            found.pop, found.contains = pipeline_counts(states, found.docno)
            found.sites, found.neighbourhoods = pipeline_sites(states, found.url)

        clusters = cluster_store(dirs, near) if with_pairs else None
        if clusters is not None:
            try:
                found.cluster = cluster_of(clusters.begin(), found.docno, found.url)
            finally:
                clusters.close()
        elif near is None:
            found.cluster = {}  # not known: the cluster shard is not among these states
        return found
    return Missing(url.strip(), spellings)


def pipeline_chunks(states: list[str] | None, url: str):
    """The chunk keys of a page of worker states, from every gram shard's share of it."""
    found = worker_shards(states or [DEFAULT_STATE]) if states else None
    if found is None:
        raise UsageError("--url with --broker needs the worker states that hold the page "
                         "(--state DIR, repeated)")
    docs, grams, shards = found
    if not shards or url_shard(url, shards) not in docs:
        raise UsageError(f"these worker states lack the doc shard of {url}: give the "
                         "--state of every worker")
    stores = [open_store(p, must_exist=True, read_only=True)
              for p in [docs[url_shard(url, shards)], *grams.values()]]
    try:
        entry = stores[0].begin().url_entry(url)
        if entry is None:
            raise UsageError(f"{url} is not in these worker states")
        parts = [doc_chunks(s.begin(), entry[0]).keys for s in stores[1:]]
        return sorted_unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
    finally:
        for s in stores:
            s.close()
