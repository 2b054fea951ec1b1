"""SPEC §6 clusters: the cluster role (engine.clusters) on a real RocksDB state against the
brute-force reference (tests/reference.ref_clusters), over random corpora of near-copies,
re-fetches and batchings; the documents it reports as changed cover every change; a giant
cluster costs no search and no storm."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdet.engine.clusters import ClusterRole
from streamdet.engine.grams import gram_set, token_hashes
from streamdet.engine.params import Params
from streamdet.engine.sketches import N_MINS, PER_SUPER, Sketch, sketch
from streamdet.engine.tokens import tokenize
from streamdet.state.rocks import RocksKV
from streamdet.state.txn import Store

from .harness import check_cluster_events, check_events, run_embedded, without_repeats
from .reference import ref_cluster_rows, ref_clusters, ref_supershingles, reference
from .sharded import sharded_pipeline

K = 5
VOCAB = [f"w{i}" for i in range(400)]


def _base(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(VOCAB) for _ in range(n)]


def _variant(words: list[str], edits: int, seed: int) -> str:
    """The base with `edits` words replaced: 1 edit keeps ~97% of the grams (near-duplicates
    almost surely), 6 edits ~90% (sometimes), more rarely or never."""
    rng = random.Random(seed)
    out = list(words)
    for _ in range(edits):
        out[rng.randrange(len(out))] = f"x{rng.randrange(10**6)}"
    return " ".join(out)


class Driver:
    """The cluster role fed batch by batch, as the engine feeds it: a re-fetch withdraws
    the URL's version before its new one is added."""

    def __init__(self, path: str) -> None:
        self.store = Store(RocksKV(path))
        self.role = ClusterRole()
        self.changed: list[set[str]] = []

    def batch(self, records: list[dict]) -> None:
        sketches = []
        for rec in records:
            tokens = tokenize(rec["text"])
            sketches.append(sketch(gram_set(tokens, K), token_hashes(tokens)))
        self.sketched([r["url"] for r in records], sketches)

    def sketched(self, urls: list[str], sketches: list[Sketch]) -> None:
        txn = self.store.begin()
        self.role.prefetch(txn, sketches)
        for url, sk in zip(urls, sketches, strict=True):
            entry = txn.url_entry(url)
            if entry is not None:
                self.role.withdraw(txn, entry[0], url, url)
                txn.kill(entry[0])
            docno = txn.allocate_docno()
            txn.put_name(docno, url.split("/")[2], url)
            txn.put_url(url, docno, 0)
            self.role.add(txn, docno, url, sk)
        changed = self.role.settle(txn)
        self.changed.append({txn.url_of(d) for d in changed})
        txn.commit()

    def rows(self) -> dict[str, dict]:
        txn = self.store.begin()
        out = {}
        for url in sorted(self._urls(txn)):
            docno = txn.url_entry(url)[0]
            cid, size, exact = ClusterRole.row(txn, docno, url)
            out[url] = {"cluster": cid, "cluster_size": size, "exact_dups": exact}
        return out

    @staticmethod
    def _urls(txn) -> list[str]:
        return [k.decode() for k, _ in txn.kv.items("urls")]

    def close(self) -> None:
        self.store.close()


@st.composite
def corpus_st(draw):
    """Near-copies of one or two base texts, each a variant of a base or of an earlier
    record (chains: a ~ b ~ c with a !~ c, which a re-fetch of b splits), over few URLs
    (re-fetches), with some texts too short to have grams."""
    texts = [" ".join(_base(draw(st.integers(0, 50)))) for _ in range(draw(st.integers(1, 2)))]
    urls = [f"http://s{i}.example/p" for i in range(draw(st.integers(3, 8)))]
    records = []
    for _ in range(draw(st.integers(3, 14))):
        parent = draw(st.sampled_from(texts)).split()
        edits = draw(st.sampled_from([0, 1, 1, 1, 2, 4, 8, 40]))
        text = _variant(parent, edits, draw(st.integers(0, 10**6)))
        if draw(st.integers(0, 11)) == 0:
            text = "too short"  # no grams: no sketch, a cluster of one
        texts.append(text)
        records.append({"url": draw(st.sampled_from(urls)), "text": text})
    cuts = sorted(draw(st.lists(st.integers(1, len(records) - 1), max_size=4, unique=True)))
    return records, cuts


def _batches(records: list[dict], cuts: list[int]) -> list[list[dict]]:
    edges = [0, *cuts, len(records)]
    return [records[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


def _shown(rows: dict[str, dict], url: str) -> tuple[str, bool]:
    """What a URL's cluster events show: (cluster id, in a cluster); alone by default."""
    r = rows.get(url)
    return (url, False) if r is None else (r["cluster"], r["cluster_size"] > 1)


@given(corpus=corpus_st())
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_clusters_equal_reference_after_any_batching(tmp_path_factory, corpus):
    records, cuts = corpus
    driver = Driver(str(tmp_path_factory.mktemp("near")))
    try:
        done: list[dict] = []
        before = {}
        for batch in _batches(records, cuts):
            driver.batch(batch)
            done += batch
            after = ref_clusters(done, {"k": K})
            moved = {u for u in after if _shown(after, u) != _shown(before, u)}
            assert moved <= driver.changed[-1], "a changed cluster went unreported"
            before = after
        assert driver.rows() == ref_clusters(records, {"k": K})
    finally:
        driver.close()


def _synthetic(choices: tuple[int, ...] | None, variant: int) -> Sketch:
    """A sketch whose supershingle j is variant choices[j] of position j (min-hashes chosen
    so): two such sketches share supershingle j exactly when their choices agree at j.
    None: a document without grams. Its exact key stands for a token sequence: equal only
    for equal choices and `variant` (one token sequence has one sketch; one sketch may come
    of several token sequences)."""
    if choices is None:
        return Sketch(np.zeros(0, dtype=np.uint64), 1 + variant)
    mins = np.asarray([1000 * j + 10 * c + 1 for j, c in enumerate(choices)
                       for _ in range(PER_SUPER)], dtype=np.uint64)
    assert len(mins) == N_MINS
    code = sum(c * 5**j for j, c in enumerate(choices))
    return Sketch(mins, 100 + 3 * code + variant)


choice_st = st.one_of(st.none(), st.tuples(*[st.integers(0, 4)] * 6))


@given(items=st.lists(st.tuples(st.integers(0, 7), choice_st, st.integers(0, 2)),
                      min_size=1, max_size=25),
       cuts=st.lists(st.integers(1, 24), max_size=5, unique=True))
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_clusters_of_synthetic_sketches_equal_reference(tmp_path_factory, items, cuts):
    """Sketches chosen to make dense near-duplicate graphs: chains, bridges whose
    re-fetch splits a cluster, merges of several clusters by one arrival."""
    driver = Driver(str(tmp_path_factory.mktemp("syn")))
    try:
        edges = [0, *sorted(c for c in cuts if c < len(items)), len(items)]
        latest: dict[str, tuple] = {}
        before: dict[str, dict] = {}
        for a, b in zip(edges, edges[1:], strict=False):
            part = items[a:b]
            urls = [f"http://u{u}.example/" for u, _, _ in part]
            driver.sketched(urls, [_synthetic(ch, ex) for _, ch, ex in part])
            for url, (_, ch, ex) in zip(urls, part, strict=True):
                latest[url] = (ch, ex)
            after = ref_cluster_rows(
                {u: ref_supershingles(_synthetic(ch, ex).mins.tolist())
                 for u, (ch, ex) in latest.items()},
                {u: (_synthetic(ch, ex).exact,) for u, (ch, ex) in latest.items()})
            moved = {u for u in after if _shown(after, u) != _shown(before, u)}
            assert moved <= driver.changed[-1], "a changed cluster went unreported"
            before = after
        assert driver.rows() == before
    finally:
        driver.close()


def test_a_split_and_a_merge(tmp_path):
    """a ~ b and b ~ c through different words; re-fetching b as something else splits
    {a, b, c}; fetching b back merges it again."""
    base = _base(1)
    a = " ".join(base)
    b = _variant(base, 1, 2)
    c = _variant(base, 1, 3)
    other = " ".join(_base(9))
    driver = Driver(str(tmp_path / "s"))
    try:
        recs = [{"url": "http://a.example/", "text": a}, {"url": "http://b.example/", "text": b},
                {"url": "http://c.example/", "text": c}]
        driver.batch(recs)
        assert driver.rows() == ref_clusters(recs, {"k": K})
        assert driver.rows()["http://c.example/"]["cluster"] == "http://a.example/"
        recs.append({"url": "http://a.example/", "text": other})
        driver.batch(recs[-1:])
        rows = driver.rows()
        assert rows == ref_clusters(recs, {"k": K})
        assert rows["http://a.example/"] == {"cluster": "http://a.example/",
                                             "cluster_size": 1, "exact_dups": 0}
        assert rows["http://c.example/"]["cluster"] == "http://b.example/"
        assert {"http://a.example/", "http://b.example/", "http://c.example/"} <= \
            driver.changed[-1]
    finally:
        driver.close()


def test_a_giant_cluster_is_never_searched_and_stays_quiet(tmp_path):
    """300 exact copies of a template: a copy joining with a larger URL changes nobody
    else's cluster; re-fetching copies one by one (each leaving exact twins) searches no
    member; the copy holding the id leaving changes every member's id."""
    template = " ".join(_base(5))
    driver = Driver(str(tmp_path / "g"))
    try:
        recs = [{"url": f"http://c{i:04d}.example/", "text": template} for i in range(1, 301)]
        for i in range(0, 300, 100):
            driver.batch(recs[i : i + 100])
        driver.batch([{"url": "http://c9999.example/", "text": template}])
        assert driver.changed[-1] == {"http://c9999.example/"}
        for i in range(150, 160):
            driver.batch([{"url": recs[i]["url"], "text": f"something else entirely {i} " * 3}])
            assert driver.changed[-1] == {recs[i]["url"]}
        assert driver.role.searched == 0
        driver.batch([{"url": "http://c0001.example/", "text": "gone"}])
        assert len(driver.changed[-1]) == 291  # every copy's cluster id changed
        rows = driver.rows()
        assert rows["http://c0002.example/"] == {"cluster": "http://c0002.example/",
                                                 "cluster_size": 290, "exact_dups": 289}
        assert driver.role.searched == 0
    finally:
        driver.close()


# ----------------------------------------------------------------------------- the engine


@given(corpus=corpus_st(), backend=st.sampled_from(["memory", "rocks"]))
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_engine_clusters_and_events_equal_reference(corpus, backend):
    """`streamdet run`'s engine: dump rows carry the reference's clusters after any
    batching, and the `cluster` events tell a consumer the same."""
    records, cuts = corpus
    params = Params(k=K)
    events: list[dict] = []
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True)]
    rows = run_embedded(records, params, sizes, backend=backend, events=events)
    want = ref_clusters(records, {"k": K})
    got = {u: {f: r[f] for f in ("cluster", "cluster_size", "exact_dups")}
           for u, r in rows.items()}
    assert got == want
    assert check_cluster_events(events, rows) == []
    assert check_events(events, reference(records, params)) == []


# ----------------------------------------------------------------------------- the shards


FAULTS = st.sampled_from([{}, {"crash_rate": 0.3}, {"crash_rate": 0.15, "wipe_rate": 0.2},
                          {"crash_rate": 0.1, "wipe_rate": 0.25, "lag_rate": 0.7,
                           "dup_rate": 0.2}])


@given(corpus=corpus_st(), shards=st.integers(1, 4), seed=st.integers(0, 2**16),
       faults=FAULTS)
@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_shards_clusters_and_events_equal_reference(corpus, shards, seed, faults):
    """The Kafka pipeline's engine (gram shard 0 keeps the clusters, doc shards emit the
    events) under crashes, rebuilds from the partitions, lagging group offsets and pages
    delivered twice: the clusters equal the reference's, and the `cluster` events tell
    a consumer the same."""
    records, cuts = corpus
    params = Params(k=K)
    events: list[dict] = []
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True)]
    rows = sharded_pipeline(records, params, sizes, shards=shards, seed=seed, events=events,
                            **faults)
    context = f"shards={shards} seed={seed} {faults}\nrecords={records!r}"
    got = {u: {f: r[f] for f in ("cluster", "cluster_size", "exact_dups")}
           for u, r in rows.items()}
    assert got == ref_clusters(records, {"k": K}), context
    problems = check_cluster_events(without_repeats(events), rows)
    assert not problems, context + "\n" + "\n".join(problems)


def test_messages_carry_sketches_and_cluster_rows():
    """A page's sketch rides in its PageMsg and in its add to the cluster shard only; a
    deltas message carries cluster rows (URLs in any script) beside deltas and links."""
    from streamdet.engine.clusters import ClusterRow
    from streamdet.engine.messages import DeltasMsg, GramsMsg, PageMsg
    from streamdet.engine.shards import CLUSTER_SHARD, page_adds

    tokens = tokenize(" ".join(_base(3)))
    sk = sketch(gram_set(tokens, K), token_hashes(tokens))
    page = PageMsg("http://ä.example/x", "example", gram_set(tokens, K), 1.5, sketch=sk)
    back = PageMsg.decode(page.encode())
    assert back.sketch is not None and back.sketch.encode() == sk.encode()
    assert PageMsg.decode(PageMsg("http://a.example/", "a", gram_set(tokens, K)).encode()
                          ).sketch is None
    adds = {g: GramsMsg.decode(raw) for g, raw in page_adds(page, 7, 3)}
    assert adds[CLUSTER_SHARD].sketch.encode() == sk.encode()
    assert all(m.sketch is None for g, m in adds.items() if g != CLUSTER_SHARD)
    rows = [ClusterRow(7, "http://ä.example/x", 3, 1, 42, "http://b.example/"),
            ClusterRow(9, "http://日本.example/", 1, 0, 42, "http://ä.example/x")]
    msg = DeltasMsg.decode(DeltasMsg([], clusters=rows).encode())
    assert msg.clusters == rows and msg.deltas == [] and msg.links == []
