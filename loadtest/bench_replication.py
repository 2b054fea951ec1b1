"""Replication across sites (SPEC §8): what it costs the engine, and what `phrases` costs.

    python loadtest/bench_replication.py                 # 2,000 records of the load stream
    python loadtest/bench_replication.py --pages 20000
    python loadtest/bench_replication.py --smoke         # for CI

In one process, on the load generator's records (replayed real pages, mirrors, farm
quilts, scrapers, re-fetches), analysed beforehand as the analysis processes do:

1. Engine: each batch of 512 pages applied to two RocksDB states alternately (a paired
   measurement: both see the same machine load), one by the engine as it is, one by the
   engine with §8's per-page work taken out: the trap check, the popular-phrase counting
   of the gram role (engine.popular: crossings of P, common grams' tallies) and the
   withdrawal of all of a re-fetched version's grams (patch grams only, as SPEC §1 alone
   would need). §8's share of the engine's time is the difference.
2. State: bytes of table `popular` a page (tallies and pop(d) counts).
3. `streamdet phrases --top 20`: seconds on the state (scan of the postings and tallies,
   words from the holders' texts).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from loadtest.bench_partials import analysed, stream  # noqa: E402
from loadtest.host import machine, write_result  # noqa: E402

OUT_DIR = REPO / "loadtest" / "out"
BATCH = 512


def log(msg: str) -> None:
    print(f"[bench-replication {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def without_section_8():
    """The engine with §8's per-page work replaced by nothing (for the paired baseline)."""
    from streamdet.engine import core, popular, postings

    class Uncounted(popular.PopChanges):
        def added(self, *args) -> None: ...
        def withdrawn(self, *args) -> None: ...
        def apply(self, txn) -> None: ...

    saved = (postings.PopChanges, postings._join_common, core.turn_away_traps,
             core.Engine._version_grams)
    postings.PopChanges = Uncounted
    postings._join_common = lambda *args: None
    core.turn_away_traps = lambda pages, params: (list(pages), [])
    core.Engine._version_grams = lambda self, txn, docno: txn.doc(docno).patch_grams()
    try:
        yield
    finally:
        (postings.PopChanges, postings._join_common, core.turn_away_traps,
         core.Engine._version_grams) = saved


def paired_engine(pages: list, params, with_dir: str, without_dir: str):
    """The batches through two states, with and without §8, alternately."""
    from streamdet.engine.core import Engine
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    stores = {"with": Store(RocksKV(with_dir)), "without": Store(RocksKV(without_dir))}
    engines = {k: Engine(params) for k in stores}
    seconds = {"with": 0.0, "without": 0.0}
    for i in range(0, len(pages), BATCH):
        order = ("with", "without") if (i // BATCH) % 2 == 0 else ("without", "with")
        for kind in order:
            batch = pages[i : i + BATCH]
            with contextlib.nullcontext() if kind == "with" else without_section_8():
                t = time.perf_counter()
                txn = stores[kind].begin()
                engines[kind].process(txn, batch)
                txn.commit({})
                stores[kind].compact()
                seconds[kind] += time.perf_counter() - t
    stores["without"].close()
    return stores["with"], seconds


def popular_bytes(store) -> dict:
    out = {"tallies": 0, "tally_bytes": 0, "pop_records": 0, "pop_bytes": 0}
    for key, value in store.kv.items("popular"):
        kind = "tally" if key.startswith(b"t") else "pop"
        out["tallies" if kind == "tally" else "pop_records"] += 1
        out[f"{kind}_bytes"] += len(key) + len(value)
    return out


def phrases_seconds(store, params) -> tuple[float, list[dict]]:
    from streamdet.adapters.phrases import phrase_rows
    from streamdet.adapters.views import live_docnos

    t = time.perf_counter()
    rows = phrase_rows([store], store.begin().text, lambda: live_docnos([store]), 20,
                       params)
    return time.perf_counter() - t, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=2000, help="records of the load stream")
    ap.add_argument("--smoke", action="store_true", help="300 records (CI)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    from streamdet.engine.params import Params

    n = 300 if args.smoke else args.pages
    params = Params()
    records = stream(n, args.seed)
    log(f"stream: {len(records)} records; analysing")
    pages, _ = analysed(records, params)
    log(f"{len(pages)} pages; the engine with and without §8")
    with tempfile.TemporaryDirectory(prefix="streamdet-replication-") as tmp:
        store, seconds = paired_engine(pages, params, f"{tmp}/with", f"{tmp}/without")
        try:
            kept = popular_bytes(store)
            phrases_s, top = phrases_seconds(store, params)
        finally:
            store.close()
    share = (seconds["with"] - seconds["without"]) / seconds["with"]
    result = {
        "benchmark": "bench_replication",
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": machine(),
        "config": {"records": n, "seed": args.seed, "batch": BATCH, "params": params.to_dict()},
        "engine": {"seconds": seconds},
        "state": kept,
        "top_phrases": top[:5],
        "figures": {
            "pages": len(pages),
            "engine_ms_per_page_with": 1000 * seconds["with"] / len(pages),
            "engine_ms_per_page_without": 1000 * seconds["without"] / len(pages),
            "section8_share_of_engine": share,
            "popular_bytes_per_page": (kept["tally_bytes"] + kept["pop_bytes"]) / len(pages),
            "tallies": kept["tallies"],
            "phrases_seconds": phrases_s,
        },
    }
    out = write_result(result, OUT_DIR, f"{n}p", args.out)
    f = result["figures"]
    print(f"pages                 {f['pages']:,}")
    print(f"engine                {f['engine_ms_per_page_with']:.2f} ms a page with §8, "
          f"{f['engine_ms_per_page_without']:.2f} without: §8 is {100 * share:.1f}% of the "
          "engine's time")
    print(f"state                 {f['popular_bytes_per_page']:.0f} B a page in table popular "
          f"({kept['tallies']:,} common grams' tallies, {kept['pop_records']:,} pop(d) counts)")
    print(f"phrases --top 20      {phrases_s:.2f} s; first: "
          + ", ".join(f"{r['docs']}x '{r['phrase']}'" for r in top[:3]))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
