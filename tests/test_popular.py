"""SPEC §8's popular phrases: pop(d) and `phrases`, exact beyond m, against the reference.

pop(d) rides in every equivalence test's rows (tests.reference adds it, tests.harness
compares it); here, the cases those random corpora reach rarely are written out: a
common gram whose count falls back below P (its holders recovered from power sums),
P above m, the phrase list with its counts beyond m, in both the embedded engine and the
sharded pipeline under crashes, and the power sums alone.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.params import Params, ParamsError
from streamdet.engine.popular import Tally
from streamdet.engine.power_sums import PRIME, add_to, recover, sums_of

from .cli_helpers import dump_rows, streamdet, write_jsonl
from .harness import assert_same_rows, run_embedded
from .reference import ref_phrases, reference
from .sharded import sharded_pipeline
from .strategies import any_corpus_st

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])


def _docs(*pairs):
    return [{"url": u, "text": t} for u, t in pairs]


@settings(max_examples=300, deadline=None)
@given(kept=st.sets(st.integers(1, PRIME - 1), max_size=6),
       passing=st.sets(st.integers(1, 2**63), max_size=40), width=st.integers(1, 6))
def test_power_sums_name_the_holders_left(kept, passing, width):
    """Whatever came and went, the sums of the holders left say exactly which they are."""
    passing = {d % (PRIME - 1) + 1 for d in passing} - kept
    sums = [0] * width
    for d in [*passing, *kept]:
        add_to(sums, d)
    for d in passing:
        add_to(sums, d, -1)
    assert sums == sums_of(list(kept), width)
    if len(kept) <= width:
        assert recover(sums, len(kept)) == sorted(kept)
    else:
        with pytest.raises(ValueError):
            recover(sums, len(kept))


def test_power_sums_refuse_what_no_set_gives():
    sums = sums_of([5, 9], 3)
    with pytest.raises(ValueError):
        recover(sums, 3)  # two holders' sums read as three
    with pytest.raises(ValueError):
        add_to([0], PRIME)  # a docno the field cannot tell from 0


def test_tally_keeps_witnesses_and_bytes():
    t = Tally.of((3, 1, 4, 1_000_000_007, 5), 4)
    assert (t.count, t.witnesses) == (5, [3, 1, 4, 1_000_000_007])
    for d in (3, 1, 4, 1_000_000_007):
        t.remove(d)
    assert t.witnesses == [5]  # refilled from the power sums once all went
    back = Tally.decode(t.encode(), 4)
    assert (back.count, back.sums, back.witnesses) == (1, t.sums, [5])


def test_popular_must_be_at_least_two():
    with pytest.raises(ParamsError):
        Params(popular=1)


def _farm(n: int, phrase: str = "buy cheap pills online now") -> list[dict]:
    return _docs(*((f"http://s{i}.org/", f"{phrase} page {i} here") for i in range(n)))


@pytest.mark.parametrize("whole", [True, False])
def test_common_phrase_falls_back_below_p(whole):
    """A phrase on 8 pages (m = 3: common, no holder list) loses 5 of them to re-fetches:
    the 3 left (< P = 4) lose it from pop(d), found from the tally's power sums; then it
    climbs back to P and all 4 count it again."""
    params = Params(k=2, m=3, c=1, theta=0.5, popular=4)
    records = _farm(8)
    records += _docs(*((f"http://s{i}.org/", f"fresh words {i} only") for i in range(5)))
    expected = reference(records, params)
    assert expected["http://s7.org/"]["pop"] == 0
    batches = [len(records)] if whole else [1] * len(records)
    assert_same_rows(expected, run_embedded(records, params, batches))
    records += _docs(("http://s0.org/", "buy cheap pills online now again"))
    expected = reference(records, params)
    assert expected["http://s7.org/"]["pop"] == 4  # its 4 grams of the phrase
    assert_same_rows(expected, run_embedded(records, params, [len(records)]))
    assert_same_rows(expected, run_embedded(records, params, [1] * len(records)))


def test_a_passage_below_p_again_finds_its_holders_once_not_once_per_gram(monkeypatch):
    """SPEC §9: a copied passage's common grams share one tally; a withdrawal that takes
    them below P finds the holders left from the power sums once for all of them (a root
    finding costs milliseconds: once per gram, a 20,000-gram passage took one step 100 s)."""
    from streamdet.engine import popular

    calls = []
    monkeypatch.setattr(popular, "recover", lambda sums, n: calls.append(n) or recover(sums, n))
    if hasattr(popular, "_recovered"):  # found again, not remembered from another test
        popular._recovered.cache_clear()
    params = Params(k=2, m=3, c=1, theta=0.5, popular=4)
    passage = " ".join(f"w{i}" for i in range(200))  # 199 grams
    records = _docs(*((f"http://s{i}.org/", passage) for i in range(6)))
    records += _docs(*((f"http://s{i}.org/", f"fresh words {i} only") for i in range(3)))
    expected = reference(records, params)
    assert expected["http://s5.org/"]["pop"] == 0  # 3 holders left < P
    assert_same_rows(expected, run_embedded(records, params, [1] * len(records)))
    assert 0 < len(calls) <= 4  # one holder set, at most one finding a step


def test_p_above_m_counts_through_tallies():
    """P = 7 > m = 2: a gram is common before it is popular; crossing P needs the
    holders, which no posting lists."""
    params = Params(k=2, m=2, c=1, theta=0.5, popular=7)
    for n in (6, 7, 9):
        records = _farm(n)
        expected = reference(records, params)
        assert expected["http://s0.org/"]["pop"] == (5 if n >= 7 else 0)  # through "now page"
        assert_same_rows(expected, run_embedded(records, params, [1] * n))
        phrases: list[dict] = []
        run_embedded(records, params, [n], phrases=phrases)
        assert phrases == ref_phrases(records, params)
        assert phrases[0] == {"phrase": "buy cheap", "docs": n}  # counted beyond m


@settings(max_examples=60, **SETTINGS)
@given(corpus=any_corpus_st(), top=st.one_of(st.integers(1, 6), st.just(1 << 30)))
def test_phrases_equal_the_reference(corpus, top):
    """Every gram on two pages or more, or the first `top` (ties at the cut decided by
    the phrase: postings are read only when tallies cannot fill the list)."""
    records, params, batches = corpus
    phrases: list[dict] = []
    run_embedded(records, params, batches, phrases=phrases, top=top)
    assert phrases == ref_phrases(records, params)[:top]


@settings(max_examples=8, **SETTINGS)
@given(corpus=any_corpus_st())
def test_phrases_of_a_rocksdb_state_equal_the_reference(corpus):
    """On RocksDB, read in the process that wrote it: the postings are still in the
    `grams` table's prefix-hashed memtable, which iterates only in total-order mode."""
    records, params, batches = corpus
    phrases: list[dict] = []
    run_embedded(records, params, batches, backend="rocks", phrases=phrases)
    assert phrases == ref_phrases(records, params)


@settings(max_examples=40, **SETTINGS)
@given(corpus=any_corpus_st(), shards=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_phrases_and_pop_of_the_shards_under_crashes(corpus, shards, seed):
    """The gram shards count, the doc shards keep the texts: the same phrases and pop(d)
    as the reference, through crashes and outboxes sent twice."""
    records, params, batches = corpus
    phrases: list[dict] = []
    rows = sharded_pipeline(records, params, batches, shards=shards, seed=seed,
                            crash_rate=0.3, phrases=phrases)
    assert phrases == ref_phrases(records, params)
    assert {u: r["pop"] for u, r in rows.items()} == {
        u: r["pop"] for u, r in reference(records, params).items()}


def test_phrases_cli(tmp_path):
    """`streamdet phrases --top N [--json]` on a `run` state, and pop in `dump`."""
    params = Params(k=3, m=3, popular=3)
    records = _farm(6) + _docs(("http://x.org/", "nothing shared at all here"))
    random.Random(1).shuffle(records)
    src = write_jsonl(tmp_path / "in.jsonl", records)
    state = tmp_path / "state"
    streamdet("run", "--input", src, "--state", state, "--events", tmp_path / "ev.jsonl",
              "-k", "3", "-m", "3", "--popular", "3")
    out = streamdet("phrases", "--state", state, "--top", "2", "--json").stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == ref_phrases(records, params)[:2]
    assert rows == [{"phrase": "buy cheap pills", "docs": 6},
                    {"phrase": "cheap pills online", "docs": 6}]
    assert streamdet("phrases", "--state", state, "--top", "1").stdout == b"6\tbuy cheap pills\n"
    expected = reference(records, params)
    assert {u: r["pop"] for u, r in dump_rows(state).items()} == {
        u: r["pop"] for u, r in expected.items()}
    assert expected["http://s0.org/"]["pop"] == 4  # its 3-grams up to "online now page"
    bad = streamdet("phrases", "--state", state, "--top", "0", check=False)
    assert bad.returncode == 2 and b"--top" in bad.stderr


def test_a_state_from_before_tallies_goes_on_without_them():
    """A state upgraded from format 9 has common grams without tallies and no pop(d)
    records: pages joining and leaving those grams (and pop moving below what was never
    counted) must not stop the engine; §1's results stay exact, pop reads as not known."""
    from streamdet.engine.analysis import analyze
    from streamdet.engine.core import Engine
    from streamdet.engine.records import page_from_object
    from streamdet.reading.views import dump_rows
    from streamdet.state.kv import MemoryKV
    from streamdet.state.txn import Store

    params = Params(k=2, m=3, popular=2)
    kv = MemoryKV()
    store, engine = Store(kv), Engine(params)
    records = _docs(*((f"http://s{i}.org/", "a b c d") for i in range(6)),
                    ("http://t0.org/", "e f"), ("http://t1.org/", "e f"))

    def run(batch):
        txn = store.begin()
        engine.process(txn, [analyze(page_from_object(r), params) for r in batch])
        txn.commit({})

    run(records)
    kv.write([("popular", key, None) for key, _ in list(kv.items("popular"))])  # format 9
    store.set_meta("popular", "partial")  # as check_state marks an upgraded state
    later = _docs(("http://s9.org/", "a b c d"),
                  *((f"http://s{i}.org/", f"x{i} y{i} z{i}") for i in range(6)),
                  ("http://t0.org/", "g h"))  # t1 loses a popular gram it was not counted for
    for rec in later:  # joins the old common grams, then their old holders leave
        run([rec])
    rows = {r["url"]: r for r in dump_rows(store, params)}
    assert all(r["pop"] is None for r in rows.values())
    expected = reference(records + later, params)
    for row in [*rows.values(), *expected.values()]:
        del row["pop"]
    assert_same_rows(expected, rows)
