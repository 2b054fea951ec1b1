"""DocState: patch-gram slots and per-source masks against a plain model, through any
sequence of gains, losses, source changes and encode/decode round trips."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamdet.state.schema import (
    COMMON,
    DocState,
    decode_doc,
    decode_posting,
    encode_doc,
    encode_posting,
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
            again = decode_doc(encode_doc(d))
            assert encode_doc(again) == encode_doc(d)
            d = again
        assert _view(d) == model
        assert d.n_patch == len(model)
        assert all(m for m in d.masks.values())  # no empty masks kept
        assert d.foreign_patch_grams() == sum(1 for v in model.values() if v)


def test_postings_round_trip():
    for p in [(), (1,), (3, 2**64 - 1, 7), COMMON]:
        assert decode_posting(encode_posting(p)) == p
