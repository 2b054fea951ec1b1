"""The signals of one page that tell a content farm's quilt from natural reuse (SPEC §10),
each a number in [0, 1]: the one implementation of their formulas, shared by `streamdet
rank` (ranking.features, over every live page's dump row) and the engine's `spam_score`
(engine.spam_score, over the state as a batch leaves it).

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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .components import Components
from .servers import host_of, registered_domain

FEATURES = ("spread", "texts", "replicated", "kin", "domains", "patch", "host_quilts",
            "mirrored", "boilerplate")
TEXTS_FULL = 8  # distinct source texts at which `texts` reaches 1 (log scale below)


@dataclass(frozen=True)
class Signals:
    """A page's feature values (in FEATURES order) and the raw figures behind them, which
    `why` quotes to a reviewer."""

    values: tuple[float, ...]
    figures: Mapping[str, Any]


@dataclass(frozen=True)
class Page:
    """What the signals read of the page itself: its cover's sources (URL, grams), patch
    fraction, near-duplicate cluster's size, contains(L, f) (0 when not known) and its
    host's live pages and quilts."""

    url: str
    patch_fraction: float
    sources: Sequence[tuple[str, int]]
    cluster_size: int
    contains: float
    host_pages: int
    host_quilts: int


class Surroundings(Protocol):
    """What the signals read of the pages around a page (its sources and their partners):
    the dump rows of every live page (ranking.features.Corpus), or the state as a batch
    leaves it (engine.spam_score)."""

    def cluster(self, url: str) -> str:
        """The near-duplicate cluster of a live page (its URL when alone or not known)."""
        ...

    def cluster_size(self, url: str) -> int:
        """The size of a live page's near-duplicate cluster (1 when alone)."""
        ...

    def partners(self, url: str) -> Collection[str]:
        """The URLs of a live page's partial duplicates (SPEC §7)."""
        ...

    def quilted(self, url: str) -> bool:
        """Whether a live page is quilted."""
        ...


def texts_of(near: Surroundings, sources: Sequence[tuple[str, int]]) -> list[int]:
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
        texts.join(i, by_cluster.setdefault(near.cluster(url), i))
    for url, positions in at.items():
        for other in near.partners(url):
            for j in at.get(other, ()):
                texts.join(positions[0], j)
    grams: dict[int, int] = {}
    for i, (_, g) in enumerate(sources):
        grams[texts.find(i)] = grams.get(texts.find(i), 0) + g
    return list(grams.values())


def replicated(near: Surroundings, source: str, page: str) -> bool:
    """Whether a source of `page` is a text the web replicates: it has a near-duplicate,
    or a partial duplicate that is neither `page` nor a quilt (a farm's other pages share
    its donors' passages, and must not count)."""
    if near.cluster_size(source) > 1:
        return True
    return any(o != page and not near.quilted(o) for o in near.partners(source))


def signals(near: Surroundings, page: Page) -> Signals:
    """The signals of `page` among its surroundings."""
    sources = list(page.sources)
    total = sum(g for _, g in sources)
    texts = texts_of(near, sources)
    top = max(texts) / total if total else 1.0
    copied = sum(g for src, g in sources if replicated(near, src, page.url)) / total \
        if total else 0.0
    domains = {registered_domain(host_of(src)) for src, _ in sources}
    patch = float(page.patch_fraction)
    values = (
        patch * (1.0 - top),
        min(1.0, math.log2(len(texts)) / math.log2(TEXTS_FULL)) if texts else 0.0,
        copied,
        1.0 - len(texts) / len(sources) if sources else 0.0,
        len(domains) / len(sources) if sources else 0.0,
        patch,
        page.host_quilts / (page.host_pages + 1),
        1.0 if page.cluster_size > 1 else 0.0,
        float(page.contains),
    )
    figures = {"sources": len(sources), "texts": len(texts), "top_share": top,
               "replicated": copied, "domains": len(domains), "patch_fraction": patch,
               "host": host_of(page.url), "host_pages": page.host_pages,
               "host_quilts": page.host_quilts, "cluster_size": page.cluster_size,
               "contains": float(page.contains)}
    return Signals(values, figures)
