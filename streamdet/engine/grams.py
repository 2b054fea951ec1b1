"""k-gram hashes of a token sequence (SPEC §1 "grams").

Each distinct token is hashed once (64-bit murmur3); a window's hash is a polynomial of its
k token hashes, computed for all windows at once with numpy (uint64 arithmetic wraps
mod 2^64), then passed through the splitmix64 finaliser so that windows differing in one
token spread over all 64 bits. Identical windows always get identical hashes, so the
gram *set* of a document is exactly the set of distinct window hashes.
"""

from __future__ import annotations

import mmh3
import numpy as np

from .sorting import sorted_unique
from .text import unpack_text
from .tokens import tokenize

_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd constant: the polynomial base
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
EMPTY = np.empty(0, dtype=np.uint64)


def token_hashes(tokens: list[str]) -> np.ndarray:
    """uint64 hash of every token, hashing each distinct token once."""
    cache: dict[str, int] = {}
    return np.fromiter(
        (cache[t] if t in cache else cache.setdefault(t, mmh3.hash64(t, signed=False)[0])
         for t in tokens),
        dtype=np.uint64,
        count=len(tokens),
    )


def mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, vectorised."""
    h = h ^ (h >> np.uint64(30))
    h = h * _C1
    h = h ^ (h >> np.uint64(27))
    h = h * _C2
    return h ^ (h >> np.uint64(31))


def window_hashes(th: np.ndarray, k: int) -> np.ndarray:
    """Hash of each of the n-k+1 windows of k consecutive token hashes (with repeats)."""
    n = len(th) - k + 1
    if n <= 0:
        return EMPTY
    with np.errstate(over="ignore"):
        acc = th[:n].copy()
        for i in range(1, k):
            acc = acc * _MULT + th[i : i + n]
        return mix(acc)


def gram_set(tokens: list[str], k: int) -> np.ndarray:
    """Sorted distinct k-gram hashes of a document: grams(d)."""
    return sorted_unique(window_hashes(token_hashes(tokens), k))


def text_grams(packed: bytes | None, k: int) -> np.ndarray | None:
    """grams(d) of a kept text (engine.text.pack_text), hashed again as analysis hashed
    them: what the state keeps of a version instead of its grams (None: no text kept)."""
    text = unpack_text(packed)
    return None if text is None else gram_set(tokenize(text), k)
