"""loadtest/bench_growth.py: the in-process page model behind the cost-growth benchmark.

The benchmark never writes html: it replays real pages as gram sets made from token hashes.
These tests check that those gram sets are what the engine computes for real pages, that
variation and mirror families do what the benchmark's report says, that the stream is
deterministic and keeps to new URLs, and that a tiny run leaves a state whose documents are
the ones counted. Timings are measured by the benchmark, never asserted here.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest

from loadtest import bench_growth as bg
from loadtest import corpus
from streamdet.engine.analysis import analyze
from streamdet.engine.params import Params
from streamdet.engine.records import Page
from streamdet.engine.servers import host_of, registered_domain

# The real pages (the tests' slice in tests/data) are part of the test setup: missing data
# is a failure, not a skip.
assert (corpus.data_dir() / corpus.PAGES_FILE).exists(), (
    f"no {corpus.PAGES_FILE} in {corpus.data_dir()}")

PARAMS = Params()
SAMPLE = (0, 7, 42, 123, 170, 225, 270)  # spread over the slice's 280 valid pages


def same_site_pair() -> list[int]:
    """The first two pages of one host in the corpus, found rather than named, so that the
    test keeps its site whatever pages the slice holds."""
    first: dict[str, int] = {}
    for i, (url, _) in enumerate(corpus._all_records(False)):
        host = host_of(url)
        if host in first:
            return [first[host], i]
        first[host] = i
    raise AssertionError("no two pages of one site in the corpus")


@lru_cache(maxsize=1)
def models() -> tuple[bg.PageModel, ...]:
    return tuple(bg.models_of(list(SAMPLE)))


def real_grams(i: int) -> np.ndarray:
    url, html = corpus._all_records(False)[i]
    return analyze(Page(url=url, html=html), PARAMS).grams


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return len(np.intersect1d(a, b)) / max(len(np.union1d(a, b)), 1)


def test_split_marked_assigns_tokens_to_nodes() -> None:
    m = bg.MARK
    toks = ["home", f"{m}b0{m}", "a", "b", "c", f"{m}e0{m}", "menu", f"{m}b3{m}", "x", "y",
            f"{m}e3{m}"]
    keep, node, local = bg.split_marked(toks)
    assert keep == ["home", "a", "b", "c", "menu", "x", "y"]
    assert node == [-1, 0, 0, 0, -1, 3, 3]
    assert local == [0, 0, 1, 2, 0, 0, 1]


def test_unvaried_model_is_the_engines_gram_set() -> None:
    for m in models():
        got = bg.replay_grams(m, None, 0.0, PARAMS.k)
        assert jaccard(got, real_grams(m.index)) >= 0.95, m.index


def test_variation_makes_as_many_grams_new_as_replay_stream() -> None:
    ms = [m for m in models() if m.n_nodes]
    fid = bg.fidelity(ms, seed=3, vary=1.0, params=PARAMS)
    assert fid["pages"] == len(ms)
    assert fid["model_new_gram_share"] > 0.5
    assert abs(fid["model_new_gram_share"] - fid["replay_stream_new_gram_share"]) < 0.1
    ratio = fid["model_grams_per_page"] / fid["replay_stream_grams_per_page"]
    assert 0.9 < ratio < 1.1


def take(stream: bg.GrowthStream, n: int) -> list[tuple[str, bytes, bool]]:
    it = iter(stream)
    return [(p.url, p.grams.tobytes(), refetch) for p, refetch in (next(it) for _ in range(n))]


def test_stream_is_deterministic_for_a_seed() -> None:
    def make(seed: int) -> bg.GrowthStream:
        return bg.GrowthStream(list(models()), seed, 0.9, 0.2, PARAMS, mirrors=2)

    a, b, c = take(make(5), 40), take(make(5), 40), take(make(6), 40)
    assert a == b
    assert [g for _, g, _ in a] != [g for _, g, _ in c]


def test_new_documents_come_on_new_domains_and_refetches_repeat_urls() -> None:
    ms = list(models())
    stream = bg.GrowthStream(ms, 2, 0.9, 0.25, PARAMS, mirrors=3)
    got = take(stream, 120)
    originals = {registered_domain(host_of(corpus._all_records(False)[m.index][0]))
                 for m in ms}
    seen: set[str] = set()
    for url, _, refetch in got:
        assert (url in seen) == refetch
        seen.add(url)
        assert registered_domain(host_of(url)) not in originals
    assert stream.new_docs == len(seen) == sum(not r for *_, r in got)
    assert stream.arrivals == len(got) and stream.arrivals > stream.new_docs
    domains_per_round = {}
    for r in range(3):
        domains_per_round[r] = {registered_domain(host_of(stream.page(r, j).url))
                                for j in range(len(ms))}
    assert not domains_per_round[0] & domains_per_round[1]
    assert not domains_per_round[1] & domains_per_round[2]


def test_mirror_families_share_grams_within_and_not_across() -> None:
    ms = list(models())
    stream = bg.GrowthStream(ms, 4, 0.0, 0.0, PARAMS, mirrors=3)
    for j in range(len(ms)):
        fams = [stream.family(r, j) for r in range(7)]  # 7 rounds: >= 2 families of 3
        pairs = [(a, b) for a in range(7) for b in range(a + 1, 7)]
        a, b = next((a, b) for a, b in pairs if fams[a] == fams[b])
        c, d = next((c, d) for c, d in pairs if fams[c] != fams[d])
        assert np.array_equal(stream.page(a, j).grams, stream.page(b, j).grams)  # mirror
        assert len(np.intersect1d(stream.page(c, j).grams, stream.page(d, j).grams)) == 0
    flat = bg.GrowthStream(ms, 4, 0.0, 0.0, PARAMS, mirrors=0)
    assert {flat.family(r, 0) for r in range(20)} == {0}


def test_family_zero_keeps_the_real_words() -> None:
    m = models()[1]
    rng = random.Random(1)
    seed = rng.randrange(100)
    assert bg.family_salt(seed, 0) == 0
    assert bg.family_salt(seed, 1) != bg.family_salt(seed, 2)
    base = bg.replay_grams(m, None, 0.0, PARAMS.k)
    renamed = bg.replay_grams(m, None, 0.0, PARAMS.k, bg.family_salt(seed, 1))
    assert len(renamed) == len(base) and not len(np.intersect1d(base, renamed))


def test_gram_counter_exact_and_sampled() -> None:
    c = bg.GramCounter(1)
    c.add(np.array([1, 2, 3], dtype=np.uint64))
    c.add(np.array([3, 4], dtype=np.uint64))
    assert c.close_window() == {"distinct_grams": 4, "new_gram_share": 4 / 5}
    c.add(np.array([4, 5], dtype=np.uint64))
    assert c.close_window() == {"distinct_grams": 5, "new_gram_share": 1 / 2}
    s = bg.GramCounter(4)
    s.add(np.arange(0, 400, dtype=np.uint64))
    s.add(np.arange(200, 800, dtype=np.uint64))
    w = s.close_window()
    assert w["distinct_grams"] == 800  # 200 kept hashes (multiples of 4), times 4
    assert w["new_gram_share"] == pytest.approx(200 / 250)
    with pytest.raises(ValueError):
        bg.GramCounter(3)


def row(docs: int, n: int, wall: float, ms: float) -> dict:
    return {"documents": docs, "window_arrivals": n, "window_refetches": 0, "wall_s": wall,
            "engine_ms_per_page": ms}


def test_projection_flat_and_linear() -> None:
    flat = [row(d, 100, 10.0, 2.0) for d in (100, 200, 300, 400)]
    p = bg.project_seconds(flat, 1000, warmup_docs=100)
    assert p["seconds_flat"] == pytest.approx(100.0)
    assert p["seconds_linear"] == pytest.approx(100.0)
    assert p["growth_at_docs"] == pytest.approx(1.0)
    # per-document wall time x/1000 s at x documents: the rest integrates to
    # (1000^2 - 400^2) / 2000 = 420 s
    grow = [row(d, 100, 100 * (d - 50) / 1000, (d - 50) / 100) for d in (100, 200, 300, 400)]
    p = bg.project_seconds(grow, 1000)
    assert p["seconds_linear"] == pytest.approx(sum(r["wall_s"] for r in grow) + 420.0)
    assert p["engine_ms_per_page_at_docs"] == pytest.approx(10.0)
    assert p["seconds_flat"] < p["seconds_linear"]
    assert bg.project_seconds(grow[:2], 1000, warmup_docs=150)["seconds_linear"] is None


def test_projection_is_not_tilted_by_a_merge_in_the_last_window() -> None:
    """Steady cost 2 ms/page, and a big segment merge (4 ms/page more) in the last of four
    windows: the line must stay flat and carry the merges' mean (1 ms/page), not climb."""
    rows = [row(d, 100, 10.0, 2.0) | {"compact_ms_per_page": 0.0} for d in (100, 200, 300)]
    rows.append(row(400, 100, 10.4, 6.0) | {"compact_ms_per_page": 4.0})
    p = bg.project_seconds(rows, 1000)
    assert p["engine_ms_per_page_at_docs"] == pytest.approx(3.0)
    assert p["growth_at_docs"] == pytest.approx(1.5)
    # 600 more documents at 0.1 s each plus 0.4 s of merges per 400 documents
    assert p["seconds_linear"] == pytest.approx(40.4 + 600 * (0.1 + 0.001))


def test_tiny_run_leaves_the_documents_it_counted(tmp_path, monkeypatch) -> None:
    from streamdet.state import recent
    from streamdet.state.rocks import RocksKV

    monkeypatch.setattr(recent, "CAPACITY", 2048)  # segments after a few batches
    shared = bg.models_of(same_site_pair())  # two pages of one site: `sites` lists it
    stream = bg.GrowthStream([*models(), *shared], 1, 0.9, 0.05, PARAMS, mirrors=2)
    rows = bg.run(stream, tmp_path / "state", docs=60, checkpoint=25, batch=8,
                  counter=bg.GramCounter(1))
    assert [r["documents"] for r in rows] == [25, 50, 60]
    assert rows[-1]["arrivals"] == stream.arrivals >= 60
    assert sum(r["window_arrivals"] for r in rows) == stream.arrivals
    assert all(r["disk_bytes"] > 0 and r["distinct_grams"] > 0 for r in rows)
    assert rows[-1]["distinct_grams"] > rows[0]["distinct_grams"]
    assert rows[-1]["segments"] >= 1 and rows[-1]["segment_lookups_per_page"] > 0
    for r in rows:
        assert 0 <= r["vain_chunk_reads_per_page"] <= r["chunk_reads_per_page"]
        assert r["storage_read_kb_per_page"] >= 0
        assert r["sites_seconds"] > 0
    kv = RocksKV(str(tmp_path / "state"))
    try:
        urls = [key.decode() for key, _ in kv.items("urls")]
    finally:
        kv.close()
    assert len(urls) == 60
    hosts = Counter(host_of(u) for u in urls)
    domains = Counter(registered_domain(h) for h in hosts.elements())
    multi = sum(n >= 2 for n in [*hosts.values(), *domains.values()])
    assert rows[-1]["sites_rows"] == multi > 0


def _tables(path) -> dict[str, list[tuple[bytes, bytes]]]:
    from streamdet.state.rocks import RocksKV

    kv = RocksKV(str(path))
    try:
        return {t: list(kv.items(t)) for t in ("urls", "names", "docs", "dead")}
    finally:
        kv.close()


def test_a_resumed_run_continues_the_kept_state_as_one_run_would(tmp_path) -> None:
    """40 documents, then 20 more resumed on the kept state, leave the state of one
    60-document run: the stream is fast-forwarded past exactly what the state applied
    (re-fetches included), so a resumed run measures the same stream at a larger state."""
    def stream() -> bg.GrowthStream:
        return bg.GrowthStream(list(models()), 1, 0.9, 0.1, PARAMS, mirrors=2)

    one = bg.run(stream(), tmp_path / "one", docs=60, checkpoint=20, batch=8, counter=None)
    bg.run(stream(), tmp_path / "two", docs=40, checkpoint=20, batch=8, counter=None)
    s = stream()
    rows = bg.run(s, tmp_path / "two", docs=20, checkpoint=20, batch=8, counter=None,
                  resume=True)
    assert [r["documents"] for r in rows] == [60]
    assert s.arrivals == one[-1]["arrivals"] > 60  # re-fetches on top, the same ones
    assert rows[0]["window_arrivals"] == one[-1]["window_arrivals"]
    assert _tables(tmp_path / "two") == _tables(tmp_path / "one")


def test_resume_refuses_a_state_of_another_stream(tmp_path) -> None:
    bg.run(bg.GrowthStream(list(models()), 1, 0.9, 0.1, PARAMS, mirrors=2), tmp_path / "s",
           docs=10, checkpoint=10, batch=8, counter=None)
    other = bg.GrowthStream(list(models()), 2, 0.9, 0.1, PARAMS, mirrors=2)  # another seed
    with pytest.raises(SystemExit, match=r"another stream: --seed 1 \(this run: 2\)$"):
        bg.run(other, tmp_path / "s", docs=10, checkpoint=10, batch=8, counter=None,
               resume=True)
    with pytest.raises(SystemExit, match="no bench_growth run"):
        bg.run(other, tmp_path / "empty", docs=10, checkpoint=10, batch=8, counter=None,
               resume=True)


def test_a_run_cut_short_leaves_its_figures_up_to_the_last_checkpoint(tmp_path,
                                                                      monkeypatch) -> None:
    """A long run killed midway must still leave its JSON and PNG: main writes them at
    every checkpoint. The run is cut (an exception from inside it, as a ^C would) after
    its second checkpoint of three."""
    import json

    real_run = bg.run
    lines: list[str] = []

    def cut_after_two(*args, **kw):
        on_row = args[-1] if len(args) > 6 else kw.pop("on_row")
        args = args[:6] if len(args) > 6 else args

        def hook(rows: list[dict]) -> None:
            on_row(rows)
            lines.append(bg.progress_line(rows))
            if len(rows) == 2:
                raise KeyboardInterrupt

        return real_run(*args, on_row=hook, **kw)

    monkeypatch.setattr(bg, "run", cut_after_two)
    out = tmp_path / "g.json"
    with pytest.raises(KeyboardInterrupt):
        bg.main(["--docs", "90", "--checkpoint", "30", "--batch", "16", "--pool", "12",
                 "--fidelity", "0", "--gram-sample", "1", "--state", str(tmp_path / "st"),
                 "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["partial"] is True
    assert [r["documents"] for r in result["checkpoints"]] == [30, 60]
    assert result["figures"]["documents"] == 60
    assert out.with_suffix(".png").stat().st_size > 0
    assert not (tmp_path / "st").exists()  # the state is removed even when cut short
    bpg = result["checkpoints"][-1]["bytes_per_distinct_gram"]
    assert len(lines) == 2 and lines[-1].startswith("60 docs:")
    assert f"{bpg:.1f} B/gram" in lines[-1] and "RSS" in lines[-1]
    assert "chunk reads/page" in lines[-1] and "KB/page" in lines[-1]


def test_stationary_growth_per_vm_speed() -> None:
    """Windows after the warm-up: the raw growth of the means of the first and last
    windows, and the same in units of the VM's speed at the time (a VM twice as slow in
    the last windows doubles the raw figure, not the per-speed one)."""
    rows = [{"documents": d, "window_arrivals": 1000, "engine_ms_per_page": ms,
             "vm_speed_s": speed}
            for d, ms, speed in ((1000, 5.0, 0.1), (2000, 10.0, 0.2), (3000, 10.0, 0.2),
                                 (4000, 20.0, 0.4), (5000, 20.0, 0.4))]
    st = bg.stationary_growth(rows, warmup_docs=1000)
    assert st["from_documents"] == 2000 and st["windows_averaged"] == 2
    assert st["growth_of_means"] == pytest.approx(2.0)
    assert st["growth_of_means_per_vm_speed"] == pytest.approx(1.0)
    old = [{k: v for k, v in r.items() if k != "vm_speed_s"} for r in rows]
    assert "growth_of_means_per_vm_speed" not in bg.stationary_growth(old, warmup_docs=1000)


def test_judged_on_the_means_after_the_warm_up_wall_and_per_vm_speed() -> None:
    """The verdict reads the target on the means of the windows after the warm-up and
    passes only when both the wall-time and the per-VM-speed growth are within it; the
    literal first/last ratio (the first window holds the warm-up) is kept beside it."""
    def rows(ms: list[float], speed: list[float]) -> list[dict]:
        return [{"documents": 1000 * (i + 1), "window_arrivals": 1000,
                 "engine_ms_per_page": a, "vm_speed_s": b}
                for i, (a, b) in enumerate(zip(ms, speed, strict=True))]

    def verdict(rs: list[dict]) -> dict:
        growth = rs[-1]["engine_ms_per_page"] / rs[0]["engine_ms_per_page"]
        return bg.judge({"growth": growth, "stationary": bg.stationary_growth(rs, 1000)})

    # warm-up window cheap (1.0), then 10 -> 14: 1.4x on the means, the VM steady
    steady = verdict(rows([1.0, 10, 10, 14, 14], [0.2] * 5))
    assert steady["growth"] and not steady["growth_literal"]
    assert "from 1,000 documents" in steady["judged_on"]
    # the same wall times while the VM sped up by a third at the end: 1.87x per VM speed
    sped_up = verdict(rows([1.0, 10, 10, 14, 14], [0.2, 0.2, 0.2, 0.15, 0.15]))
    assert not sped_up["growth"]
    # 1.6x on the wall clock because the VM slowed down: per VM speed 1.0x, still missed
    slowed = verdict(rows([1.0, 10, 10, 16, 16], [0.2, 0.2, 0.2, 0.32, 0.32]))
    assert not slowed["growth"]
    # too short to have windows after the warm-up: first and last window
    short = bg.judge({"growth": 1.2, "stationary": None})
    assert short["growth"] and short["judged_on"] == "first and last window"
