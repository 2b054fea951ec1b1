"""Each page's partial duplicates from both sides (SPEC §7), for the spam score's signals
(engine.spam_score): a pair is kept and reported by the document with the smaller URL
(engine.partials), so its partner could find it only by reading every owner's record.

Record (table `partials`): `r<url>` the URLs of the page's partial duplicates, a sorted
JSON list (absent: none). It follows the owners' records of what their pair events showed
(`u<url>`): every change of one moves the pair in both pages' records, in one batched
read and write per batch."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable

from .keyed import KeyedRecords


def index_key(url: str) -> bytes:
    return b"r" + url.encode("utf-8")


def decode_index(raw: bytes | None) -> list[str]:
    return json.loads(raw) if raw else []


def partners_of(partials: KeyedRecords, urls: list[str]) -> list[list[str]]:
    """The partial duplicates of each URL, in one batched read."""
    return [decode_index(raw) for raw in partials.get_many([index_key(u) for u in urls])]


class PairIndex:
    """The pairs a batch added and removed, applied to the records by `flush`."""

    def __init__(self) -> None:
        self.moves: list[tuple[str, str, bool]] = []  # (url, other, paired)

    def follow(self, url: str, before: Collection[str], after: Collection[str]) -> None:
        """Owner `url`'s pairs went from the partners `before` to `after`."""
        for other in after:
            if other not in before:
                self.moves += [(url, other, True), (other, url, True)]
        for other in before:
            if other not in after:
                self.moves += [(url, other, False), (other, url, False)]

    def flush(self, partials: KeyedRecords) -> None:
        apply_moves(partials, self.moves)
        self.moves = []


def apply_moves(partials: KeyedRecords, moves: list[tuple[str, str, bool]]) -> None:
    """Pair moves (url, other, paired), in their order, into the URLs' records: one
    batched read and a write a URL moved."""
    urls = sorted({url for url, _, _ in moves})
    held = {u: set(p) for u, p in zip(urls, partners_of(partials, urls), strict=True)}
    for url, other, paired in moves:
        (held[url].add if paired else held[url].discard)(other)
    for url in urls:
        partials.put(index_key(url), _encode(held[url]))


def _encode(urls: Iterable[str]) -> bytes | None:
    found = sorted(urls)
    return json.dumps(found, ensure_ascii=False).encode("utf-8") if found else None
