"""The signals of one page that tell a content farm's quilt from natural reuse (SPEC §10),
each a number in [0, 1] computed from what the state already knows of every live page:
its row as `streamdet dump` prints it (sources with their grams, cluster, pop(d),
contains(L, f)) and the partial-duplicate pairs (SPEC §7).

Why these signals: a farm stitches passages of several unrelated texts, about evenly, each
taken from a site of its own, onto pages of its own sites that hold little else; natural
reuse (scripture in several editions, mirrors, syndicated articles, templates) copies one
text, or a few that are editions of each other, and sits among pages that are not quilts.
Two sources that are near-duplicates (SPEC §6) or partial duplicates (SPEC §7) of each
other hold one text (two editions, a mirror and its original): one source in spirit, so
their shares are merged before the spread is measured. A source with near-duplicates or
partial duplicates that are not quilts is a text the web replicates (syndicated news,
scripture, licences), which natural reuse quotes and farms seldom scrape.

The signals:
- spread: the share of the page's grams copied from beyond its largest source text
  (patch fraction times one less the largest merged share): what a quilt stitches in;
- texts: distinct source texts, on a log scale reaching 1 at TEXTS_FULL;
- replicated: the share of the covered grams whose source is a replicated text;
- kin: one less the texts per source: how many sources are editions of another one;
- domains: distinct registered domains of the sources per source;
- patch: the patch fraction;
- host_quilts: the quilts among the pages of the page's host (quilts / (pages + 1), so
  that a host of one page says little);
- mirrored: 1 when the page has near-duplicates of its own;
- boilerplate: contains(L, f), the share of its paragraphs in the labelled set."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.components import Components
from ..engine.servers import host_of, registered_domain

FEATURES = ("spread", "texts", "replicated", "kin", "domains", "patch", "host_quilts",
            "mirrored", "boilerplate")
TEXTS_FULL = 8  # distinct source texts at which `texts` reaches 1 (log scale below)


@dataclass(frozen=True)
class Signals:
    """A page's feature values (in FEATURES order) and the raw figures behind them, which
    `why` quotes to a reviewer."""

    values: tuple[float, ...]
    figures: Mapping[str, Any]


class Corpus:
    """Every live page's row and the pairs of partial duplicates, with what the signals
    read of them across pages (each URL's cluster and partners, each host's pages and
    quilts)."""

    def __init__(self, rows: Iterable[Mapping[str, Any]], pairs: Iterable[Mapping[str, Any]]
                 ) -> None:
        self.rows = {r["url"]: r for r in rows}
        self.partners: dict[str, set[str]] = {}
        for p in pairs:
            self.partners.setdefault(p["url"], set()).add(p["other"])
            self.partners.setdefault(p["other"], set()).add(p["url"])
        self.host_pages: Counter[str] = Counter()
        self.host_quilts: Counter[str] = Counter()
        for url, row in self.rows.items():
            host = host_of(url)
            self.host_pages[host] += 1
            self.host_quilts[host] += bool(row["quilted"])

    def ranked(self) -> list[str]:
        """SPEC §10: the live pages that are quilted or a partial duplicate, by URL."""
        return sorted((u for u, r in self.rows.items() if r["quilted"] or u in self.partners),
                      key=lambda u: u.encode("utf-8"))

    def cluster(self, url: str) -> str:
        """The near-duplicate cluster of a URL (itself when not known or alone)."""
        row = self.rows.get(url)
        return (row.get("cluster") or url) if row is not None else url

    def kin(self, a: str, b: str) -> bool:
        """Whether two pages hold one text: near-duplicates, or partial duplicates."""
        return self.cluster(a) == self.cluster(b) or b in self.partners.get(a, ())

    def replicated(self, source: str, page: str) -> bool:
        """Whether a source of `page` is a text the web replicates: it has a
        near-duplicate, or a partial duplicate that is neither `page` nor a quilt (a
        farm's other pages share its donors' passages, and must not count)."""
        row = self.rows.get(source)
        if row is not None and (row.get("cluster_size") or 1) > 1:
            return True
        return any(o != page and not self.rows.get(o, {}).get("quilted", False)
                   for o in self.partners.get(source, ()))


def texts_of(corpus: Corpus, sources: list[tuple[str, int]]) -> list[int]:
    """The grams of each text in spirit: the sources joined where kin, transitively
    (the components of the kin graph over the page's sources), in the order of each
    text's first source. Joined through what kin reads, a shared cluster and each
    source's partners, not by asking every pair: a page with thousands of sources costs
    its sources and their partners, not their square."""
    texts = Components(len(sources))  # a text is named by its first source
    at: dict[str, list[int]] = {}  # a source's URL -> its positions
    by_cluster: dict[str, int] = {}  # a cluster -> the first position in it
    for i, (url, _) in enumerate(sources):
        at.setdefault(url, []).append(i)
        texts.join(i, by_cluster.setdefault(corpus.cluster(url), i))
    for url, positions in at.items():
        for other in corpus.partners.get(url, ()):
            for j in at.get(other, ()):
                texts.join(positions[0], j)
    grams: dict[int, int] = {}
    for i, (_, g) in enumerate(sources):
        grams[texts.find(i)] = grams.get(texts.find(i), 0) + g
    return list(grams.values())


def signals(corpus: Corpus, url: str) -> Signals:
    """The signals of live page `url` (one the corpus holds)."""
    row = corpus.rows[url]
    sources = [(s["url"], s["grams"]) for s in row["sources"]]
    total = sum(g for _, g in sources)
    texts = texts_of(corpus, sources)
    top = max(texts) / total if total else 1.0
    replicated = sum(g for src, g in sources if corpus.replicated(src, url)) / total \
        if total else 0.0
    domains = {registered_domain(host_of(src)) for src, _ in sources}
    host = host_of(url)
    quilts, pages = corpus.host_quilts[host], corpus.host_pages[host]
    patch = float(row["patch_fraction"])
    values = (
        patch * (1.0 - top),
        min(1.0, math.log2(len(texts)) / math.log2(TEXTS_FULL)) if texts else 0.0,
        replicated,
        1.0 - len(texts) / len(sources) if sources else 0.0,
        len(domains) / len(sources) if sources else 0.0,
        patch,
        quilts / (pages + 1),
        1.0 if (row.get("cluster_size") or 1) > 1 else 0.0,
        float(row.get("contains") or 0.0),
    )
    figures = {"sources": len(sources), "texts": len(texts), "top_share": top,
               "replicated": replicated, "domains": len(domains), "patch_fraction": patch,
               "host": host, "host_pages": pages, "host_quilts": quilts,
               "cluster_size": row.get("cluster_size") or 1,
               "contains": float(row.get("contains") or 0.0)}
    return Signals(values, figures)
