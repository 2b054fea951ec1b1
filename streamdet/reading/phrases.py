"""`streamdet phrases`: the grams on the most live documents, with their words (SPEC §8).

Counts are exact beyond m: a gram with a posting has as many documents as live holders,
a common gram its tally's count (engine.popular). Grams held by one document are not
phrases anyone copied, and there are millions of them: the list holds grams on two
documents or more, so it may be shorter than asked. Order: most documents first, then
the phrase (code-point order), then the gram, so that the same state gives the same list
on every reader, a `streamdet run` state or a Kafka pipeline's gram shards alike.

A gram is a hash; its words are read from a live holder's kept text (any holder of a
posting, a tally's witnesses), tokenized and hashed again as analysis did. Should every
witness of a common gram have been withdrawn, the live documents are searched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from ..engine.grams import token_hashes, window_hashes
from ..engine.keyed import key_u64
from ..engine.params import Params
from ..engine.popular import Tally
from ..engine.text import unpack_text
from ..engine.tokens import tokenize
from ..state.schema import decode_posting
from ..state.txn import Store

TextOf = Callable[[int], bytes | None]  # a live version's packed text (None: not kept)


def _tallies(store: Store, width: int) -> Iterator[tuple[int, int, list[int]]]:
    """(gram, live documents, witnesses) of every common gram on two documents or more."""
    for key, raw in store.kv.items("popular", b"t"):
        if not key.startswith(b"t"):
            break
        tally = Tally.decode(raw, width)
        if tally.count >= 2:
            yield key_u64(key[1:]), tally.count, tally.witnesses


def _postings(store: Store, floor: int) -> Iterator[tuple[int, int, list[int]]]:
    """(gram, live documents, holders) of every gram with a posting of at least `floor`
    live holders (and two). A posting's byte length bounds its live holders, so most
    are passed over without being decoded."""
    withdrawn = store.withdrawn
    floor = max(floor, 2)
    for key, raw in store.kv.items("grams"):
        if len(raw) < 8 * floor:
            continue  # fewer holders, or the 1-byte common marker (its tally counts it)
        live = [d for d in decode_posting(raw) if d not in withdrawn]
        if len(live) >= floor:
            yield key_u64(key), len(live), live


def _best(found: list[tuple[int, int, list[int]]], n: int) -> list[tuple[int, int, list[int]]]:
    """Those of `found` whose counts reach the n-th largest (ties included)."""
    if len(found) <= n:
        return found
    counts = np.fromiter((c for _, c, _ in found), dtype=np.int64, count=len(found))
    floor = np.partition(counts, len(found) - n)[len(found) - n]
    return [f for f, c in zip(found, counts.tolist(), strict=True) if c >= floor]


def top_grams(stores: list[Store], n: int, width: int, m: int
              ) -> list[tuple[int, int, list[int]]]:
    """The grams whose document counts could be among the first n (ties at the n-th
    count included: the phrase decides among them), most documents first. Only common
    grams (their tallies) can have more than m documents: when n of them do, the
    postings need not be read at all, and otherwise only those that can reach the n-th
    count of the tallies' are."""
    if n <= 0:
        return []
    found = _best([t for store in stores for t in _tallies(store, width)], n)
    floor = min((c for _, c, _ in found), default=2) if len(found) >= n else 2
    if floor <= m:
        found = _best(found + [p for store in stores for p in _postings(store, floor)], n)
    return sorted(found, key=lambda f: -f[1])


def phrase_words(packed: bytes, grams: set[int], k: int) -> dict[int, str]:
    """The words of those of `grams` that the text holds: the k tokens joined by spaces."""
    tokens = tokenize(unpack_text(packed))
    windows = window_hashes(token_hashes(tokens), k).tolist()
    out: dict[int, str] = {}
    for i, h in enumerate(windows):
        if h in grams and h not in out:
            out[h] = " ".join(tokens[i : i + k])
    return out


def phrase_rows(stores: Iterable[Store], text_of: TextOf, live_docnos: Callable[[], Iterable[int]],
                n: int, params: Params) -> list[dict]:
    """SPEC §8's `phrases --top n`: {"phrase", "docs"} rows. `stores` are the states that
    count grams (one `run` state, or every gram shard); `text_of` reads a version's kept
    text wherever it lives; `live_docnos` lists the live versions, for the rare gram
    whose witnesses are all gone."""
    candidates = top_grams(list(stores), n, params.popular - 1, params.m)
    words = _words(candidates, text_of, live_docnos, params.k)
    rows = [(-count, words.get(g, ""), g) for g, count, _ in candidates]
    rows.sort(key=lambda r: (r[0], r[1].encode("utf-8"), r[2]))
    return [{"phrase": phrase, "docs": -neg} for neg, phrase, _ in rows[:n]]


def _words(candidates: list[tuple[int, int, list[int]]], text_of: TextOf,
           live_docnos: Callable[[], Iterable[int]], k: int) -> dict[int, str]:
    """Each candidate's words, reading each holder's text once."""
    wanted: dict[int, set[int]] = {}  # holder -> grams to read in its text
    for g, _, holders in candidates:
        if holders:
            wanted.setdefault(holders[0], set()).add(g)
    words: dict[int, str] = {}
    for d, grams in wanted.items():
        packed = text_of(d)
        if packed is not None:
            words.update(phrase_words(packed, grams, k))
    missing = {g for g, _, _ in candidates} - words.keys()
    for d in live_docnos() if missing else ():
        packed = text_of(d)
        if packed is not None:
            found = phrase_words(packed, missing, k)
            words.update(found)
            missing -= found.keys()
            if not missing:
                break
    return words
