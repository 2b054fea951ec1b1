"""Near-duplicate path (SPEC §6) against datasketch MinHashLSH, and its share of the
engine's per-page time.

    python -m loadtest.bench_near                 # 2,000 records of the load stream
    python -m loadtest.bench_near --pages 5000
    python -m loadtest.bench_near --smoke         # 150 records, for CI
    python -m loadtest.bench_near --giant 10000   # and a giant cluster of 10,000 copies

In one process, on the load generator's records (replayed crawl, planted mirrors, farm
quilts, scrapes), each page's 5-gram set made once beforehand (untimed: both sides need
it), then per batch of 512 pages, alternately:

- streamdet: the sketch (engine.sketches: 84 min-hashes, 6 supershingles of 14, 15 band
  keys, the exact key) and the cluster role on a RocksDB state (engine.clusters: add,
  withdraw on re-fetch, settle, commit);
- datasketch: `MinHash(num_perm=84)` fed the same grams (cut to 32 bits, identity hash:
  its fastest feed) and `MinHashLSH(num_perm=84, params=(6, 14))` (SPEC §6's bands):
  query, then insert.

and, on a state of its own, the whole engine as `streamdet run` drives it (every
detector on: covers, evidence, partial duplicates, clusters), each page's full analysis
(parse, tokenize, hash, text, sentences, sketch) timed once beforehand.

Prints pages/s of each and their ratio; the §6 path's share of a page's time in
`streamdet run` (analysis + engine); and the share of planted mirrors each finds
(streamdet: in the original's cluster; LSH: the original among the query's answers) and
of quilts put with one of their donors (they share ~4% of grams: should be none).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from loadtest.bench_embedded import git_revision
from loadtest.host import machine, write_result

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
BATCH = 512
SMOKE_PAGES = 150


def log(msg: str) -> None:
    print(f"[bench-near {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _identity(x: int) -> int:
    return x


def shingled(pages: int, seed: int):
    """(url, grams, token hashes) of every valid record, the analysed pages (with the
    seconds their analysis took), and the generator's truth."""
    from loadtest.generator import Generator, GeneratorConfig
    from streamdet.engine.analysis import analyze, page_text
    from streamdet.engine.grams import token_hashes
    from streamdet.engine.params import Params
    from streamdet.engine.records import BadRecord, page_from_object
    from streamdet.engine.tokens import tokenize

    gen = Generator(GeneratorConfig(seed=seed, pages=pages))
    params = Params()
    out, analysed, seconds = [], [], 0.0
    for rec in gen:
        try:
            page = page_from_object(rec)
        except BadRecord:
            continue
        a = time.perf_counter()
        analysed.append(analyze(page, params))
        seconds += time.perf_counter() - a
        th = token_hashes(tokenize(page_text(page)))
        out.append((page.url, analysed[-1].grams, th))
    return out, analysed, seconds, gen.truth


def arrive(role, txn, url: str, sk) -> None:
    """A version of `url` with sketch `sk` reaches the cluster role as the engine brings
    it: the URL's live version withdrawn first."""
    entry = txn.url_entry(url)
    if entry is not None:
        role.withdraw(txn, entry[0], url, url)
        txn.kill(entry[0])
    docno = txn.allocate_docno()
    txn.put_name(docno, url, url)
    txn.put_url(url, docno, 0)
    role.add(txn, docno, url, sk)


def measure(pages: int, seed: int, work: Path) -> dict:
    import numpy as np
    from datasketch import MinHash, MinHashLSH

    from streamdet.engine.clusters import ClusterRole
    from streamdet.engine.core import Engine
    from streamdet.engine.params import Params
    from streamdet.engine.sketches import sketch
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    docs, analysed, t_analysis, truth = shingled(pages, seed)
    log(f"{len(docs):,} pages shingled and analysed")
    store, role = Store(RocksKV(str(work / "state"))), ClusterRole()
    engine_store, engine = Store(RocksKV(str(work / "engine"))), Engine(Params())
    lsh = MinHashLSH(num_perm=84, params=(6, 14))
    t_sketch = t_role = t_lsh = t_engine = 0.0
    answers: dict[str, list[str]] = {}
    for at in range(0, len(docs), BATCH):
        part = docs[at : at + BATCH]
        a = time.perf_counter()
        sketches = [sketch(g, th) for _, g, th in part]
        b = time.perf_counter()
        txn = store.begin()
        role.prefetch(txn, sketches)
        for (url, _, _), sk in zip(part, sketches, strict=True):
            arrive(role, txn, url, sk)
        role.settle(txn)
        txn.commit()
        c = time.perf_counter()
        for url, g, _ in part:
            m = MinHash(num_perm=84, hashfunc=_identity)
            m.update_batch((g & np.uint64(0xFFFFFFFF)).tolist())
            answers[url] = lsh.query(m)
            if url not in lsh.keys:
                lsh.insert(url, m)
        d = time.perf_counter()
        etxn = engine_store.begin()
        engine.process(etxn, analysed[at : at + BATCH])
        etxn.commit({})
        e = time.perf_counter()
        t_sketch, t_role, t_lsh = t_sketch + b - a, t_role + c - b, t_lsh + d - c
        t_engine += e - d
    engine_store.close()
    txn = store.begin()

    def cluster(url: str) -> str | None:
        entry = txn.url_entry(url)
        return None if entry is None else ClusterRole.row(txn, entry[0], url)[0]

    mirrors = truth.mirrors  # mirror URL -> original URL
    found = sum(cluster(m) is not None and cluster(m) == cluster(o) for m, o in mirrors.items())
    lsh_found = sum(o in answers.get(m, ()) or m in answers.get(o, ())
                    for m, o in mirrors.items())
    with_donor = sum(any(cluster(q) == cluster(d) for d in info["donors"])
                     for q, info in truth.quilts.items())
    store.close()
    n = len(docs)
    ours = n / (t_sketch + t_role)
    theirs = n / t_lsh
    return {
        "pages": n,
        "streamdet": {"seconds": t_sketch + t_role, "sketch_ms_per_page": 1000 * t_sketch / n,
                      "clusters_ms_per_page": 1000 * t_role / n, "pages_per_s": ours},
        "lsh": {"seconds": t_lsh, "ms_per_page": 1000 * t_lsh / n, "pages_per_s": theirs},
        "ratio": ours / theirs,
        "run_ms_per_page": 1000 * (t_analysis + t_engine) / n,
        "analysis_ms_per_page": 1000 * t_analysis / n,
        "engine_ms_per_page": 1000 * t_engine / n,
        "near_share_of_run": (t_sketch + t_role) / (t_analysis + t_engine),
        "mirrors": len(mirrors),
        "mirror_recall": found / len(mirrors) if mirrors else None,
        "lsh_mirror_recall": lsh_found / len(mirrors) if mirrors else None,
        "quilts": len(truth.quilts),
        "quilts_with_a_donor": with_donor,
        "searched": role.searched,
        "splits": role.splits,
    }


def _synthetic(choices: tuple[int, ...], copy: int):
    """A sketch whose supershingle j is determined by choices[j] (min-hashes so chosen):
    sketches agreeing on 2 positions are near-duplicates; `copy` tells exact duplicates
    apart (equal copy and choices: the same token sequence)."""
    import numpy as np

    from streamdet.engine.sketches import N_MINS, PER_SUPER, Sketch

    mins = np.asarray([1000 * j + 10 * c + 1 for j, c in enumerate(choices)
                       for _ in range(PER_SUPER)], dtype=np.uint64)
    assert len(mins) == N_MINS
    return Sketch(mins, hash((choices, copy)) & ((1 << 63) - 1))


def giant(size: int, work: Path) -> dict:
    """A cluster of `size` pages through the cluster role on RocksDB, in batches of 512:
    two halves of exact copies of two templates (A, B) joined by one bridge page near
    both. Timed: the build; re-fetching 100 copies one by one (each leaves exact twins:
    nothing is searched, nobody else hears of it); the bridge leaving (the cluster
    splits in two: one search of all its members); the bridge back (a merge of the two).
    For each, the documents reported as changed (what events are made of)."""
    from streamdet.engine.clusters import ClusterRole
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    store, role = Store(RocksKV(str(work / "giant"))), ClusterRole()
    a, b, bridge = (0,) * 6, (1,) * 6, (0, 0, 1, 1, 2, 2)

    def batch(items: list[tuple[str, object]]) -> tuple[float, int]:
        t = time.perf_counter()
        txn = store.begin()
        role.prefetch(txn, [sk for _, sk in items])
        for url, sk in items:
            arrive(role, txn, url, sk)
        changed = role.settle(txn)
        txn.commit()
        return time.perf_counter() - t, len(changed)

    urls = [f"https://copy{i:06d}.example/" for i in range(size)]
    half = size // 2
    pages = [(u, _synthetic(a if i < half else b, 0)) for i, u in enumerate(urls)]
    pages.insert(half, ("https://bridge.example/", _synthetic(bridge, 0)))
    build = sum(batch(pages[i : i + BATCH])[0] for i in range(0, len(pages), BATCH))
    refetch = [batch([(urls[i], _synthetic(a if i < half else b, 0))])
               for i in range(1, 101)]
    searched = role.searched
    split = batch([("https://bridge.example/", _synthetic((3,) * 6, 0))])
    split_searched = role.searched - searched
    merge = batch([("https://bridge.example/", _synthetic(bridge, 0))])
    store.close()
    return {"size": size + 1, "build_s": build,
            "refetch_ms": 1000 * sum(t for t, _ in refetch) / len(refetch),
            "refetch_changed": max(n for _, n in refetch), "refetch_searched": searched,
            "split_ms": 1000 * split[0], "split_changed": split[1],
            "split_searched": split_searched, "merge_ms": 1000 * merge[0],
            "merge_changed": merge[1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help=f"{SMOKE_PAGES} records (CI)")
    ap.add_argument("--giant", type=int, default=0, metavar="N",
                    help="also time a giant cluster of N copies (split, merge, re-fetches)")
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_near-*.json)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.pages = SMOKE_PAGES
    with tempfile.TemporaryDirectory(prefix="streamdet-near-") as tmp:
        figures = measure(args.pages, args.seed, Path(tmp))
        if args.giant:
            figures["giant"] = giant(args.giant, Path(tmp))
    s, t = figures["streamdet"], figures["lsh"]
    print(f"pages                    {figures['pages']:,}")
    print(f"streamdet §6 path        {s['pages_per_s']:8.1f} pages/s  (sketch "
          f"{s['sketch_ms_per_page']:.2f} ms, clusters {s['clusters_ms_per_page']:.2f} ms)")
    print(f"MinHashLSH (84, 6x14)    {t['pages_per_s']:8.1f} pages/s  "
          f"({t['ms_per_page']:.2f} ms a page)")
    print(f"ratio                    {figures['ratio']:.2f}  (target >= 1.0)")
    print(f"streamdet run, a page    {figures['run_ms_per_page']:.2f} ms (analysis "
          f"{figures['analysis_ms_per_page']:.2f}, engine {figures['engine_ms_per_page']:.2f});"
          f" §6 share {figures['near_share_of_run']:.3f}  (target <= 0.15)")
    print(f"mirrors found            {figures['mirror_recall']}  "
          f"(LSH {figures['lsh_mirror_recall']}) of {figures['mirrors']}")
    print(f"quilts with a donor      {figures['quilts_with_a_donor']} of {figures['quilts']}")
    if "giant" in figures:
        g = figures["giant"]
        print(f"giant cluster            {g['size']:,} pages built in {g['build_s']:.1f} s; "
              f"a copy re-fetched {g['refetch_ms']:.2f} ms ({g['refetch_changed']} changed, "
              f"{g['refetch_searched']} searched); split {g['split_ms']:.0f} ms "
              f"({g['split_searched']:,} searched, {g['split_changed']:,} changed); merge "
              f"{g['merge_ms']:.0f} ms ({g['merge_changed']:,} changed)")
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = {"benchmark": "bench_near", "at": stamp, "git": git_revision(),
              "host": machine(), "config": vars(args), "figures": figures}
    size = str(figures["pages"]) + "p"
    print(f"wrote {write_result(result, OUT_DIR, size, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
