"""Reads that gather one page's figures from the shards of worker states: its doc shard,
its partial duplicates from every doc shard, pop(d) and contains from every gram shard,
its sites from the site shard, its cluster from the cluster shard."""

from __future__ import annotations

from ..console import UsageError
from ..engine.params import Params
from .states import DEFAULT_STATE, cluster_store, open_store, state_dirs


def pipeline_sites(states: list[str] | None, url: str) -> tuple[list[dict], list[dict]]:
    """A page's host, domain and neighbourhoods with their figures, from the site shard
    of worker states (doc shard 0, engine.site_shard; none when it is not among them)."""
    from ..engine.badness import page_neighbourhoods
    from ..engine.site_shard import SITE_SHARD
    from ..engine.sites import page_sites
    from .views import worker_shards

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
    from .views import contains_counts, contains_of, pop_counts, pop_of, worker_shards

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
    from .explain import Missing, cluster_of, look_up
    from .views import pairs_of

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
    import numpy as np

    from ..engine.labelled import doc_chunks
    from ..engine.routing import url_shard
    from ..state.sorting import sorted_unique
    from .views import worker_shards

    found = worker_shards(states or [DEFAULT_STATE]) if states else None
    if found is None:
        raise UsageError("--url with --broker needs the worker states that hold the page "
                         "(--state DIR, repeated)")
    docs, grams, shards = found
    stores = [open_store(p, must_exist=True, read_only=True)
              for p in [docs.get(url_shard(url, shards)), *grams.values()] if p]
    try:
        entry = stores[0].begin().url_entry(url) if url_shard(url, shards) in docs else None
        if entry is None:
            raise UsageError(f"{url} is not in these worker states")
        parts = [doc_chunks(s.begin(), entry[0]).keys for s in stores[1:]]
        return sorted_unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
    finally:
        for s in stores:
            s.close()
