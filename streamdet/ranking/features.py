"""The spam ranking's view of a whole state (SPEC §10): every live page's row as `streamdet
dump` prints it (sources with their grams, cluster, contains(L, f)) and the
partial-duplicate pairs (SPEC §7), with what the signals read across pages (each URL's
cluster and partners, each host's pages and quilts). The signals' formulas are
engine.spam_signals', shared with the engine's `spam_score` on events, so that `rank`
and the events score a page alike."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ..engine import spam_signals
from ..engine.servers import host_of
from ..engine.spam_signals import FEATURES, TEXTS_FULL, Page, Signals, texts_of

__all__ = ["FEATURES", "TEXTS_FULL", "Corpus", "Signals", "page_of", "signals", "texts_of"]


class Corpus:
    """Every live page's row and the pairs of partial duplicates, with what the signals
    read across pages (engine.spam_signals.Surroundings)."""

    def __init__(self, rows: Iterable[Mapping[str, Any]], pairs: Iterable[Mapping[str, Any]]
                 ) -> None:
        self.rows = {r["url"]: r for r in rows}
        self.partner_sets: dict[str, set[str]] = {}
        for p in pairs:
            self.partner_sets.setdefault(p["url"], set()).add(p["other"])
            self.partner_sets.setdefault(p["other"], set()).add(p["url"])
        self.host_pages: Counter[str] = Counter()
        self.host_quilts: Counter[str] = Counter()
        for url, row in self.rows.items():
            host = host_of(url)
            self.host_pages[host] += 1
            self.host_quilts[host] += bool(row["quilted"])

    def ranked(self) -> list[str]:
        """SPEC §10: the live pages that are quilted or a partial duplicate, by URL."""
        return sorted((u for u, r in self.rows.items() if r["quilted"] or u in self.partner_sets),
                      key=lambda u: u.encode("utf-8"))

    def cluster(self, url: str) -> str:
        """The near-duplicate cluster of a URL (itself when not known or alone)."""
        row = self.rows.get(url)
        return (row.get("cluster") or url) if row is not None else url

    def kin(self, a: str, b: str) -> bool:
        """Whether two pages hold one text: near-duplicates, or partial duplicates (what
        texts_of joins sources by)."""
        return self.cluster(a) == self.cluster(b) or b in self.partners(a)

    def cluster_size(self, url: str) -> int:
        row = self.rows.get(url)
        return (row.get("cluster_size") or 1) if row is not None else 1

    def partners(self, url: str) -> Collection[str]:
        return self.partner_sets.get(url, ())

    def quilted(self, url: str) -> bool:
        return bool(self.rows.get(url, {}).get("quilted", False))


def page_of(corpus: Corpus, url: str) -> Page:
    """What the signals read of live page `url` itself, from its row."""
    row = corpus.rows[url]
    host = host_of(url)
    return Page(url, float(row["patch_fraction"]),
                [(s["url"], s["grams"]) for s in row["sources"]], corpus.cluster_size(url),
                float(row.get("contains") or 0.0), corpus.host_pages[host],
                corpus.host_quilts[host])


def signals(corpus: Corpus, url: str) -> Signals:
    """The signals of live page `url` (one the corpus holds)."""
    return spam_signals.signals(corpus, page_of(corpus, url))
