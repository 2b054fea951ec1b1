"""Broder's sketch of a document (SPEC §6): 84 min-hashes of its gram set, 6 supershingles
of 14 min-hashes each, and the keys under which its near-duplicates and exact duplicates
are found.

- *Min-hashes.* hᵢ(d) = min over g ∈ grams(d) of mix(H(g) XOR Kᵢ), Kᵢ = mix((i+1)·B),
  i = 0…83, with H(g) the gram hashes analysis already made (engine.grams is SPEC §6's
  H). One compiled pass over the grams (engine.minhash), 84 running minima: a 10 MB
  page's million grams need no memory beyond the grams themselves.
- *Supershingles.* Supershingle j = low 64 bits of MurmurHash3 x64_128 (seed 0) of
  h₁₄ⱼ…h₁₄ⱼ₊₁₃ as 112 little-endian bytes.
- *Band keys.* Two documents are near-duplicates when they share supershingle j for at
  least 2 of the 6 values of j, that is, when they share the pair (j₁, sⱼ₁, j₂, sⱼ₂) for
  some j₁ < j₂. Each of the 15 pairs is hashed to one 64-bit key: near-duplicates are
  exactly the documents that share a band key, and the near-duplicate graph is the union
  of one clique per band key (engine.clusters finds components on that).
- *Exact key.* A 64-bit hash of the token hash sequence: identical token sequences have
  equal keys (collisions accepted as negligible, SPEC §1).

A document without grams (fewer than k tokens) has no sketch, no supershingles and no band
keys: it is nobody's near-duplicate.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import combinations

import mmh3
import numpy as np

from .grams import mix

N_MINS = 84
N_SUPER = 6
PER_SUPER = N_MINS // N_SUPER  # 14
PAIRS = tuple(combinations(range(N_SUPER), 2))  # the 15 (j1, j2), j1 < j2
MIN_SHARED = 2  # supershingles two near-duplicates share (SPEC §6)

_B = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1
SEEDS = mix(np.asarray([((i + 1) * _B) & _M64 for i in range(N_MINS)], dtype=np.uint64))
_J1 = np.asarray([a for a, _ in PAIRS], dtype=np.intp)
_J2 = np.asarray([b for _, b in PAIRS], dtype=np.intp)
_PAIR_SALT = mix(np.arange(1, len(PAIRS) + 1, dtype=np.uint64) * np.uint64(_B))
NO_KEYS = np.zeros(0, dtype=np.uint64)


@dataclass(frozen=True, eq=False)
class Sketch:
    """What a document version brings to §6: its min-hashes (empty: no grams) and the
    key of its token sequence. Its band keys are derived once, when first asked for, and
    kept in its record so that a cluster's members are searched without recomputing them."""

    mins: np.ndarray  # uint64 (84,) or (0,)
    exact: int

    @cached_property
    def bands(self) -> np.ndarray:
        """The 15 band keys (none without min-hashes)."""
        return band_keys(supershingles(self.mins))

    def to_array(self) -> np.ndarray:
        """exact key, band keys (15 or none), min-hashes (84 or none), as one u64 array."""
        return np.concatenate(([np.uint64(self.exact)], self.bands, self.mins)).astype(
            np.uint64)

    @staticmethod
    def from_array(a: np.ndarray) -> Sketch:
        nb = len(PAIRS) if len(a) > 1 else 0
        s = Sketch(a[1 + nb :], int(a[0]))
        s.__dict__["bands"] = a[1 : 1 + nb]  # the cached_property's value, as stored
        return s

    def encode(self) -> bytes:
        """to_array as little-endian bytes (its record in table near)."""
        return self.to_array().astype("<u8").tobytes()

    @staticmethod
    def decode(raw: bytes) -> Sketch:
        return Sketch.from_array(np.frombuffer(raw, dtype="<u8").astype(np.uint64))


def min_hashes(grams: np.ndarray) -> np.ndarray:
    """The 84 min-hashes of a gram set (empty when there are no grams): mix(H(g) ^ Kᵢ),
    in one compiled pass over the grams (engine.minhash)."""
    if not len(grams):
        return NO_KEYS
    from .minhash import min_mixed  # compiled: loaded in the processes that make sketches

    return min_mixed(grams, SEEDS)


def supershingles(mins: np.ndarray) -> np.ndarray:
    """The 6 supershingles of 84 min-hashes (empty when there are none)."""
    if not len(mins):
        return NO_KEYS
    raw = np.ascontiguousarray(mins, dtype="<u8").tobytes()
    step = 8 * PER_SUPER
    return np.asarray([mmh3.hash64(raw[i : i + step], signed=False)[0]
                       for i in range(0, len(raw), step)], dtype=np.uint64)


def band_keys(supers: np.ndarray) -> np.ndarray:
    """The 15 band keys of 6 supershingles, one per pair j1 < j2 (empty when none)."""
    if not len(supers):
        return NO_KEYS
    with np.errstate(over="ignore"):
        return mix((mix(supers[_J1] ^ _PAIR_SALT) * np.uint64(_B)) ^ supers[_J2])


def exact_key(token_hashes: np.ndarray) -> int:
    """The key of a token sequence (its token hashes, in order)."""
    raw = np.ascontiguousarray(token_hashes, dtype="<u8").tobytes()
    return mmh3.hash64(raw, signed=False)[0]


def sketch(grams: np.ndarray, token_hashes: np.ndarray) -> Sketch:
    return Sketch(min_hashes(grams), exact_key(token_hashes))


def resemblance(a: np.ndarray, b: np.ndarray) -> float:
    """Estimated resemblance of two documents: the fraction of equal min-hashes (0 when
    either has none)."""
    if not len(a) or not len(b):
        return 0.0
    return float(np.count_nonzero(a == b)) / N_MINS
