"""Sentences and their keys (SPEC §7), for Zhang's partial-duplicate diagonals.

A page's visible text is cut at the terminators `. ! ? … 。 ！ ？ ؟ ।` and at line breaks
(block boundaries are line breaks in the visible text: engine.text); a sentence is the
tokens between two cuts (SPEC §1 tokens), and one of fewer than MIN_TOKENS tokens is
skipped, taking no position. A sentence's key is a hash of its token sequence, and its
span runs from its first token's start to its last token's end.

Repeats are matched once per run (SPEC §9 "Bounded engine work"), so that no pair of pages
can make the diagonals quadratic: a run of consecutive sentences with one key is one
sentence, spanning the run; and a key still on more than m positions of the page is common
in it, as a key on more than m pages is common: it keeps its positions but its key is
NO_KEY, which matches nothing (engine.sentence_postings posts no such key). A pair of pages
then has at most m cells per sentence of either (engine.diagonals).

Tokens never hold a terminator or a line break (they are runs of letters, numbers and
marks), so the cuts are found once over the text's code points and each token's sentence
is the number of cuts before it. Keys come from prefix sums of the token hashes weighted by
powers of an odd base (invertible mod 2^64), so every sentence is hashed in time linear in
its tokens, however long: a 2-million-token "sentence" costs what its tokens cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .grams import mix

TERMINATORS = ".!?…。！？؟।"
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines splits at
MIN_TOKENS = 5
NO_KEY = 0  # the key of a sentence common in its page: it matches nothing

_CUTS = np.array(sorted(map(ord, TERMINATORS + LINE_BREAKS)), dtype=np.uint32)
_BASE = np.uint64(0xD6E8FEB86659FD93)  # odd: invertible mod 2^64
_BASE_INV = np.uint64(pow(int(_BASE), -1, 1 << 64))
_LENGTH = np.uint64(0x9FB21C651E98DF25)  # folds a sentence's length into its key


@dataclass(frozen=True)
class Sentences:
    """A page's sentences of at least MIN_TOKENS tokens, in order: position i is index i."""

    keys: np.ndarray  # uint64
    starts: np.ndarray  # int64, code points of the visible text
    ends: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.keys)

    def encode(self) -> bytes:
        """keys as u64, then starts and ends as u32 (texts are far below 4 G code points)."""
        return b"".join((self.keys.astype("<u8").tobytes(), self.starts.astype("<u4").tobytes(),
                         self.ends.astype("<u4").tobytes()))

    @classmethod
    def decode(cls, raw: bytes | None) -> Sentences:
        if not raw:
            return NONE
        n = len(raw) // 16
        keys = np.frombuffer(raw, dtype="<u8", count=n).astype(np.uint64)
        starts = np.frombuffer(raw, dtype="<u4", count=n, offset=8 * n).astype(np.int64)
        ends = np.frombuffer(raw, dtype="<u4", count=n, offset=12 * n).astype(np.int64)
        return cls(keys, starts, ends)


NONE = Sentences(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64),
                 np.zeros(0, dtype=np.int64))


def cuts_before(text: str, offsets: np.ndarray, cuts: np.ndarray = _CUTS) -> np.ndarray:
    """For each offset, how many of the `cuts` (sorted code points: by default the
    terminators and line breaks) precede it in `text`."""
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    is_cut = np.isin(points, cuts)
    before = np.zeros(len(points) + 1, dtype=np.int64)
    np.cumsum(is_cut, out=before[1:])
    return before[offsets]


def _powers(base: np.uint64, n: int) -> np.ndarray:
    """base^0 ... base^(n-1) mod 2^64."""
    out = np.full(n, base, dtype=np.uint64)
    out[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(out, dtype=np.uint64)


def split_sentences(text: str, hashes: np.ndarray, starts: np.ndarray,
                    ends: np.ndarray, m: int) -> Sentences:
    """The sentences of `text` from its tokens (their hashes, engine.grams.token_hashes,
    and offsets, engine.tokens.token_spans), runs of repeats collapsed and keys on more
    than `m` positions made NO_KEY."""
    n = len(hashes)
    if n < MIN_TOKENS:
        return NONE
    first, stop = runs(cuts_before(text, starts))
    keep = stop - first >= MIN_TOKENS
    first, stop = first[keep], stop[keep]
    if not len(first):
        return NONE
    keys = run_keys(hashes, first, stop)
    head = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    tail = np.append(head[1:] - 1, len(keys) - 1)
    return Sentences(common_in_page(keys[head], m), starts[first[head]].astype(np.int64),
                     ends[stop[tail] - 1].astype(np.int64))


def common_in_page(keys: np.ndarray, m: int) -> np.ndarray:
    """`keys` with those on more than `m` positions replaced by NO_KEY."""
    if len(keys) <= m:
        return keys
    distinct, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return np.where(counts[inverse] > m, np.uint64(NO_KEY), keys)


def runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[first, stop) token indexes of the runs of equal ids (tokens between two cuts)."""
    cut = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    return np.concatenate(([0], cut)), np.concatenate((cut, [len(ids)]))


def run_keys(hashes: np.ndarray, first: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """The key of each run of token hashes [first, stop): a hash of its token sequence,
    its length folded in, from one prefix sum however long the runs are."""
    n = len(hashes)
    with np.errstate(over="ignore"):
        prefix = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum(hashes * _powers(_BASE, n), dtype=np.uint64, out=prefix[1:])
        inv = _powers(_BASE_INV, n)
        sums = (prefix[stop] - prefix[first]) * inv[first]
        return mix(sums + (stop - first).astype(np.uint64) * _LENGTH)
