"""SPEC §6 sketches: the reference's building blocks checked by hand, and the engine's
min-hashes, supershingles, band keys and exact keys checked against the reference."""

from __future__ import annotations

import struct
from itertools import combinations

import mmh3
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.grams import gram_set, token_hashes
from streamdet.engine.sketches import (
    N_MINS,
    SEEDS,
    band_keys,
    exact_key,
    min_hashes,
    resemblance,
    sketch,
    supershingles,
)
from streamdet.engine.tokens import tokenize

from .reference import (
    ref_cluster_rows,
    ref_gram_hash,
    ref_mix,
    ref_near,
    ref_resemblance,
    ref_sketch,
    ref_supershingles,
)

B = 0x9E3779B97F4A7C15


# ----------------------------------------------------------------------------- reference


def test_mix_is_splitmix64():
    # splitmix64 seeded with 0: its first output is mix(0 + B) = 0xE220A8397B1DCDAF, its
    # second mix(2B) = 0x6E789E6AA1B965F4 (the published sequence)
    assert ref_mix(B) == 0xE220A8397B1DCDAF
    assert ref_mix((2 * B) % (1 << 64)) == 0x6E789E6AA1B965F4
    assert ref_mix(0) == 0


def test_gram_hash_by_hand():
    # one token: H = mix(t); two tokens: H = mix(t0*B + t1) mod 2^64
    t = [mmh3.hash64(w.encode(), signed=False)[0] for w in ("a", "b")]
    assert ref_gram_hash(("a",)) == ref_mix(t[0])
    assert ref_gram_hash(("a", "b")) == ref_mix((t[0] * B + t[1]) % (1 << 64))
    assert ref_gram_hash(("a", "b")) != ref_gram_hash(("b", "a"))


def test_sketch_of_one_gram_by_hand():
    # a text of exactly k tokens has one gram g: h_i = mix(H(g) ^ K_i), K_i = mix((i+1)B)
    h = ref_gram_hash(("one", "two", "three", "four", "five"))
    mins = ref_sketch(["one", "two", "three", "four", "five"], 5)
    assert len(mins) == 84
    assert mins[0] == ref_mix(h ^ ref_mix(B))
    assert mins[83] == ref_mix(h ^ ref_mix((84 * B) % (1 << 64)))


def test_no_grams_no_sketch():
    assert ref_sketch(["one", "two", "three", "four"], 5) == []
    assert ref_supershingles([]) == []
    assert not ref_near([], [])


def test_supershingles_by_hand():
    mins = list(range(1, 85))
    expected = [mmh3.hash64(struct.pack("<14Q", *range(14 * j + 1, 14 * j + 15)),
                            signed=False)[0] for j in range(6)]
    assert ref_supershingles(mins) == expected


def test_near_needs_two_equal_supershingles_at_the_same_j():
    a = [1, 2, 3, 4, 5, 6]
    assert ref_near(a, [1, 2, 0, 0, 0, 0])
    assert ref_near(a, [0, 0, 0, 0, 5, 6])
    assert not ref_near(a, [1, 0, 0, 0, 0, 0])
    assert not ref_near(a, [2, 1, 4, 3, 6, 5])  # equal values at other j do not count


def test_clusters_are_components_named_by_smallest_url():
    # a ~ b (j = 0, 1), b ~ c (j = 2, 3), a !~ c: one cluster of three, named a;
    # d shares one supershingle with a only: alone
    supers = {"http://a/": [1, 2, 3, 4, 5, 6], "http://b/": [1, 2, 9, 9, 9, 9],
              "http://c/": [7, 8, 9, 9, 7, 8], "http://d/": [1, 0, 0, 0, 0, 0],
              "http://e/": []}
    tokens = {u: (u,) for u in supers}
    tokens["http://e/"] = tokens["http://d/"]  # e and d: same token sequence
    rows = ref_cluster_rows(supers, tokens)
    for u in ("http://a/", "http://b/", "http://c/"):
        assert rows[u] == {"cluster": "http://a/", "cluster_size": 3, "exact_dups": 0}
    assert rows["http://d/"] == {"cluster": "http://d/", "cluster_size": 1, "exact_dups": 1}
    assert rows["http://e/"] == {"cluster": "http://e/", "cluster_size": 1, "exact_dups": 1}
    # without b, a and c fall apart
    del supers["http://b/"]
    rows = ref_cluster_rows(supers, tokens)
    assert rows["http://a/"]["cluster_size"] == rows["http://c/"]["cluster_size"] == 1
    assert rows["http://c/"]["cluster"] == "http://c/"


# ----------------------------------------------------------------------------- engine

WORDS = ["alpha", "beta", "gamma", "delta", "straße", "東京", "naïve", "x", "42", "émoji😀"]
tokens_st = st.lists(st.sampled_from(WORDS), min_size=0, max_size=40)


@given(tokens=tokens_st, k=st.integers(1, 6))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_min_hashes_equal_reference(tokens, k):
    mins = min_hashes(gram_set(tokens, k))
    assert mins.tolist() == ref_sketch(tokens, k)
    assert supershingles(mins).tolist() == ref_supershingles(ref_sketch(tokens, k))


def test_min_hashes_of_real_text_equal_reference():
    text = ("The quick brown fox jumps over the lazy dog while the cat sleeps. " * 3
            + "Straße und Gärten; 東京タワー is tall. Ünïcödé naïve café 😀 done")
    tokens = tokenize(text)
    assert min_hashes(gram_set(tokens, 5)).tolist() == ref_sketch(tokens, 5)


def test_min_hashes_equal_numpy_over_every_gram():
    """The compiled pass against numpy's mix over grams x seeds at once, on grams over the
    whole 64-bit range (the top bit set too) and on pages of one gram and of many."""
    from streamdet.engine.grams import mix

    rng = np.random.default_rng(7)
    for n in (1, 2, 513, 5_000):
        grams = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
        assert (min_hashes(grams) == mix(grams[:, None] ^ SEEDS[None, :]).min(axis=0)).all()
    assert min_hashes(np.zeros(0, dtype=np.uint64)).size == 0


@given(a=st.lists(st.integers(0, 3), min_size=6, max_size=6),
       b=st.lists(st.integers(0, 3), min_size=6, max_size=6))
def test_shared_band_key_iff_near(a, b):
    sa, sb = np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)
    shared = set(band_keys(sa).tolist()) & set(band_keys(sb).tolist())
    assert bool(shared) == ref_near(a, b)
    # each shared key is one pair of positions where both agree
    agree = {p for p in combinations(range(6), 2) if a[p[0]] == b[p[0]] and a[p[1]] == b[p[1]]}
    assert len(shared) == len(agree)


def test_band_keys_are_fifteen_distinct():
    keys = band_keys(np.asarray([5, 5, 5, 5, 5, 5], dtype=np.uint64))
    assert len(keys) == 15 and len(set(keys.tolist())) == 15
    assert len(band_keys(np.zeros(0, dtype=np.uint64))) == 0


@given(a=tokens_st, b=tokens_st)
def test_exact_key_iff_same_tokens(a, b):
    ka, kb = exact_key(token_hashes(a)), exact_key(token_hashes(b))
    assert (ka == kb) == (a == b)


def test_resemblance_is_the_fraction_of_equal_min_hashes():
    a = np.arange(N_MINS, dtype=np.uint64)
    b = a.copy()
    b[:21] += np.uint64(1000)
    assert resemblance(a, b) == ref_resemblance(a.tolist(), b.tolist()) == 63 / 84
    assert resemblance(a, np.zeros(0, dtype=np.uint64)) == 0.0


def test_sketch_round_trip():
    s = sketch(gram_set(tokenize("one two three four five six"), 5),
               token_hashes(tokenize("one two three four five six")))
    back = type(s).decode(s.encode())
    assert back.exact == s.exact and (back.mins == s.mins).all()
    assert (back.bands == s.bands).all() and len(back.bands) == 15
    empty = sketch(gram_set([], 5), token_hashes([]))
    assert len(type(empty).decode(empty.encode()).mins) == 0
