"""DocState: patch-gram slots and per-source masks against a plain model, through any
sequence of gains, losses, source changes and encode/decode round trips."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.state.maskcodec import decode_masks, encode_masks
from streamdet.state.schema import (
    COMMON,
    DocState,
    decode_doc,
    decode_posting,
    encode_doc,
    encode_posting,
    encode_slots,
)

GRAMS = st.integers(min_value=0, max_value=12)
SOURCES = st.integers(min_value=1, max_value=5)
OPS = st.lists(st.tuples(st.sampled_from(["gain", "lose", "add", "drop", "roundtrip"]),
                         st.lists(GRAMS, max_size=5, unique=True), SOURCES), max_size=40)


def _view(d: DocState) -> dict[int, set[int]]:
    """gram -> sources, read through the slots and masks."""
    return {g: {s for s, m in d.masks.items() if m >> i & 1} for g, i in d.pos.items()}


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_slots_and_masks_follow_a_plain_model(ops):
    d = DocState(100)
    model: dict[int, set[int]] = {}
    for op, grams, src in ops:
        if op == "gain":
            new = [g for g in grams if g not in model]
            d.gain(new)
            model.update({g: set() for g in new})
        elif op == "lose":
            gone = [g for g in grams if g in model]
            d.lose(gone)
            for g in gone:
                del model[g]
        elif op in ("add", "drop"):
            have = [g for g in grams if g in model]
            if op == "add":
                d.add_source(src, d.bits(have))
                for g in have:
                    model[g].add(src)
            else:
                d.drop_source(src, d.bits(have))
                for g in have:
                    model[g].discard(src)
        else:
            again = decode_doc(encode_doc(d), encode_slots(d))
            assert encode_doc(again) == encode_doc(d)
            assert encode_slots(again) == encode_slots(d)
            d = again
        assert _view(d) == model
        assert d.n_patch == len(model)
        assert all(m for m in d.masks.values())  # no empty masks kept
        assert d.foreign_patch_grams() == sum(1 for v in model.values() if v)


def test_postings_round_trip():
    for p in [(), (1,), (3, 2**64 - 1, 7), COMMON]:
        assert decode_posting(encode_posting(p)) == p


MASKS = st.integers(min_value=1, max_value=3000).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.sets(st.integers(0, n - 1), min_size=1,
                                                     max_size=5), min_size=1, max_size=4)),
).flatmap(lambda case: st.tuples(st.just(case[0]), st.lists(st.sampled_from(case[1]),
                                                             max_size=12)))


@settings(max_examples=200, deadline=None)
@given(MASKS)
def test_masks_round_trip_with_repeats(case):
    n_slots, bit_sets = case
    masks = [sum(1 << i for i in bits) for bits in bit_sets]
    blob = b"prefix" + encode_masks(masks, n_slots) + b"suffix"
    decoded, end = decode_masks(blob, len(b"prefix"), len(masks), n_slots)
    assert decoded == masks
    assert blob[end:] == b"suffix"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.sets(SOURCES, max_size=4)),
                unique_by=lambda t: t[0], max_size=30),
       st.lists(GRAMS, max_size=8, unique=True))
def test_holder_bits_equal_one_bits_call_per_holder(gram_holders, earlier):
    d = DocState(100)
    d.gain(earlier)  # slots taken before, and one freed, as in a document seen before
    d.lose(earlier[:1])
    grams = [g for g, _ in gram_holders]
    d.gain(grams)
    holders = [tuple(h) for _, h in gram_holders]
    expected = {s: d.bits([g for g, h in zip(grams, holders, strict=True) if s in h])
                for s in set().union(*holders)}
    assert d.holder_bits(grams, holders) == expected
