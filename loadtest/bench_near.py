"""Near-duplicate path (SPEC §6) alone against datasketch MinHashLSH, before it is fed by
`run` and `worker`.

    python loadtest/bench_near.py                 # 2,000 records of the load stream
    python loadtest/bench_near.py --pages 5000
    python loadtest/bench_near.py --smoke         # 150 records, for CI

In one process, on the load generator's records (replayed crawl, planted mirrors, farm
quilts, scrapes), each page's 5-gram set made once beforehand (untimed: both sides need
it), then per batch of 512 pages, alternately:

- streamdet: the sketch (engine.sketches: 84 min-hashes, 6 supershingles of 14, 15 band
  keys, the exact key) and the cluster role on a RocksDB state (engine.clusters: add,
  withdraw on re-fetch, settle, commit);
- datasketch: `MinHash(num_perm=84)` fed the same grams (cut to 32 bits, identity hash:
  its fastest feed) and `MinHashLSH(num_perm=84, params=(6, 14))` (SPEC §6's bands):
  query, then insert.

Prints pages/s of each and their ratio, and the share of planted mirrors each finds
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from loadtest.bench_embedded import git_revision  # noqa: E402
from loadtest.host import machine, write_result  # noqa: E402

OUT_DIR = REPO / "loadtest" / "out"
BATCH = 512
SMOKE_PAGES = 150


def log(msg: str) -> None:
    print(f"[bench-near {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _identity(x: int) -> int:
    return x


def shingled(pages: int, seed: int):
    """(url, grams, token hashes) of every valid record, and the generator's truth."""
    from loadtest.generator import Generator, GeneratorConfig
    from streamdet.engine.analysis import page_text
    from streamdet.engine.grams import sorted_unique, token_hashes, window_hashes
    from streamdet.engine.records import BadRecord, page_from_object
    from streamdet.engine.tokens import tokenize

    gen = Generator(GeneratorConfig(seed=seed, pages=pages))
    out = []
    for rec in gen:
        try:
            page = page_from_object(rec)
        except BadRecord:
            continue
        th = token_hashes(tokenize(page_text(page)))
        out.append((page.url, sorted_unique(window_hashes(th, 5)), th))
    return out, gen.truth


def measure(pages: int, seed: int, work: Path) -> dict:
    import numpy as np
    from datasketch import MinHash, MinHashLSH

    from streamdet.engine.clusters import ClusterRole
    from streamdet.engine.sketches import sketch
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    docs, truth = shingled(pages, seed)
    log(f"{len(docs):,} pages shingled")
    store, role = Store(RocksKV(str(work / "state"))), ClusterRole()
    lsh = MinHashLSH(num_perm=84, params=(6, 14))
    t_sketch = t_role = t_lsh = 0.0
    answers: dict[str, list[str]] = {}
    for at in range(0, len(docs), BATCH):
        part = docs[at : at + BATCH]
        a = time.perf_counter()
        sketches = [sketch(g, th) for _, g, th in part]
        b = time.perf_counter()
        txn = store.begin()
        role.prefetch(txn, sketches)
        for (url, _, _), sk in zip(part, sketches, strict=True):
            entry = txn.url_entry(url)
            if entry is not None:
                role.withdraw(txn, entry[0], url, url)
                txn.kill(entry[0])
            docno = txn.allocate_docno()
            txn.put_name(docno, url, url)
            txn.put_url(url, docno, 0)
            role.add(txn, docno, url, sk)
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
        t_sketch, t_role, t_lsh = t_sketch + b - a, t_role + c - b, t_lsh + d - c
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
        "mirrors": len(mirrors),
        "mirror_recall": found / len(mirrors) if mirrors else None,
        "lsh_mirror_recall": lsh_found / len(mirrors) if mirrors else None,
        "quilts": len(truth.quilts),
        "quilts_with_a_donor": with_donor,
        "searched": role.searched,
        "splits": role.splits,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help=f"{SMOKE_PAGES} records (CI)")
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_near-*.json)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.pages = SMOKE_PAGES
    with tempfile.TemporaryDirectory(prefix="streamdet-near-") as tmp:
        figures = measure(args.pages, args.seed, Path(tmp))
    s, t = figures["streamdet"], figures["lsh"]
    print(f"pages                    {figures['pages']:,}")
    print(f"streamdet §6 path        {s['pages_per_s']:8.1f} pages/s  (sketch "
          f"{s['sketch_ms_per_page']:.2f} ms, clusters {s['clusters_ms_per_page']:.2f} ms)")
    print(f"MinHashLSH (84, 6x14)    {t['pages_per_s']:8.1f} pages/s  "
          f"({t['ms_per_page']:.2f} ms a page)")
    print(f"ratio                    {figures['ratio']:.2f}  (target >= 1.0)")
    print(f"mirrors found            {figures['mirror_recall']}  "
          f"(LSH {figures['lsh_mirror_recall']}) of {figures['mirrors']}")
    print(f"quilts with a donor      {figures['quilts_with_a_donor']} of {figures['quilts']}")
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = {"benchmark": "bench_near", "at": stamp, "git": git_revision(),
              "host": machine(), "config": vars(args), "figures": figures}
    size = str(figures["pages"]) + "p"
    print(f"wrote {write_result(result, OUT_DIR, size, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
