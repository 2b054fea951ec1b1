"""Partial-duplicate benchmark (SPEC §7): what sentences, sentence postings and pairs cost.

    python -m loadtest.bench_partials                 # 2,000 records of the load stream
    python -m loadtest.bench_partials --pages 20000
    python -m loadtest.bench_partials --smoke         # for CI

In one process:

1. Stream: the load generator's records (replayed real pages, mirrors, farm quilts and
   single-source scrapers), analysed as the analysis processes do (timed: the analysis
   with sentences is the baseline the cutting is compared with).
2. Sentences: cutting every page's visible text into sentences and keying them
   (engine.sentences.split_sentences, from tokens already made), ms a page.
3. Engine: each batch of 256 pages applied to two RocksDB states, one with the pages'
   sentences and one with them left out, alternately (a paired measurement: both see the
   same machine load); §7's share of the engine's time is the difference.
4. State: bytes a page of table `partials`, per kind of record.
5. Pairs: how many, and `dump --partials` ms a pair.
6. The worst case: a 2,000,000-token sentence, and a 10 MB text of short sentences:
   seconds and peak traced memory of cutting and keying.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

from loadtest.host import machine, write_result

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
BATCH = 256


def log(msg: str) -> None:
    print(f"[bench-partials {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def stream(pages: int, seed: int) -> list[dict]:
    from loadtest.generator import Generator, GeneratorConfig

    return list(Generator(GeneratorConfig(seed=seed, pages=pages)))


def analysed(records: list[dict], params) -> tuple[list, float]:
    """The pages as the analysis processes make them (dead letters left out), and the
    seconds that took."""
    from streamdet.adapters.payloads import analyze_payloads
    from streamdet.engine.records import DEFAULT_MAX_BODY

    t = time.perf_counter()
    out = [a for a in analyze_payloads(records, params, DEFAULT_MAX_BODY)
           if not isinstance(a, tuple)]
    return out, time.perf_counter() - t


def cutting(texts: list[str]) -> dict:
    """split_sentences alone, from tokens made beforehand (untimed)."""
    from streamdet.engine.grams import token_hashes
    from streamdet.engine.params import Params
    from streamdet.engine.sentences import split_sentences
    from streamdet.engine.tokens import token_spans

    tokenized = []
    for text in texts:
        tokens, starts, ends = token_spans(text)
        tokenized.append((text, token_hashes(tokens), starts, ends))
    t = time.perf_counter()
    m = Params().m
    n = sum(len(split_sentences(*x, m)) for x in tokenized)
    seconds = time.perf_counter() - t
    return {"ms_per_page": 1000 * seconds / len(texts), "sentences_per_page": n / len(texts)}


def paired_engine(pages: list, params, with_dir: str, without_dir: str):
    """The batches through two states, with and without sentences, alternately."""
    from streamdet.engine.core import Engine
    from streamdet.engine.sentences import NONE
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    stores = {"with": Store(RocksKV(with_dir)), "without": Store(RocksKV(without_dir))}
    engines = {k: Engine(params) for k in stores}
    stripped = [dataclasses.replace(p, sentences=NONE) for p in pages]
    seconds = {"with": 0.0, "without": 0.0}
    events = {"with": 0, "without": 0}
    for i in range(0, len(pages), BATCH):
        order = ("with", "without") if (i // BATCH) % 2 == 0 else ("without", "with")
        for kind in order:
            batch = (pages if kind == "with" else stripped)[i : i + BATCH]
            t = time.perf_counter()
            txn = stores[kind].begin()
            evs, _ = engines[kind].process(txn, batch)
            txn.commit({})
            stores[kind].compact()
            seconds[kind] += time.perf_counter() - t
            events[kind] += len(evs)
    stores["without"].close()
    return stores["with"], seconds, events


def state_bytes(store) -> dict:
    kinds: dict[str, dict] = {}
    for key, value in store.kv.items("partials"):
        k = kinds.setdefault(key[:1].decode(), {"records": 0, "bytes": 0})
        k["records"] += 1
        k["bytes"] += len(key) + len(value)
    return {"bytes": sum(k["bytes"] for k in kinds.values()), "by_kind": kinds}


def worst_case(text: str) -> dict:
    """Tokenizing, then cutting and keying `text`: seconds of the cut, peak traced memory."""
    from streamdet.engine.grams import token_hashes
    from streamdet.engine.params import Params
    from streamdet.engine.sentences import split_sentences
    from streamdet.engine.tokens import token_spans

    tokens, starts, ends = token_spans(text)
    hashes = token_hashes(tokens)
    del tokens
    t = time.perf_counter()
    m = Params().m
    n = len(split_sentences(text, hashes, starts, ends, m))
    seconds = time.perf_counter() - t
    tracemalloc.start()
    split_sentences(text, hashes, starts, ends, m)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"chars": len(text), "tokens": len(hashes), "sentences": n, "seconds": seconds,
            "peak_mb": peak / 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=2000, help="records of the load stream")
    ap.add_argument("--smoke", action="store_true", help="200 records (CI)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    from streamdet.engine.params import Params
    from streamdet.engine.text import unpack_text
    from streamdet.reading.views import partial_rows

    n = 200 if args.smoke else args.pages
    params = Params()
    records = stream(n, args.seed)
    log(f"stream: {len(records)} records; analysing")
    pages, analysis_seconds = analysed(records, params)
    cut = cutting([unpack_text(p.text) for p in pages])
    log(f"cutting {cut['ms_per_page']:.3f} ms a page; the engine with and without sentences")
    with tempfile.TemporaryDirectory(prefix="streamdet-partials-") as tmp:
        store, seconds, events = paired_engine(pages, params, f"{tmp}/with", f"{tmp}/without")
        try:
            kept = state_bytes(store)
            t = time.perf_counter()
            rows = partial_rows(store, params)
            dump_ms = 1000 * (time.perf_counter() - t) / max(len(rows), 1)
        finally:
            store.close()
    words = " ".join(f"w{i % 1000}" for i in range(2_000_000))
    short = "".join(f"Sentence number {i} has five tokens. " for i in range(300_000))[:10_000_000]
    worst = [worst_case(words), worst_case(short)]
    share = (seconds["with"] - seconds["without"]) / seconds["with"]
    result = {
        "benchmark": "bench_partials",
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": machine(),
        "config": {"records": n, "seed": args.seed, "batch": BATCH, "params": params.to_dict()},
        "engine": {"seconds": seconds, "events": events},
        "cutting": cut,
        "state": kept,
        "worst_case": worst,
        "figures": {
            "pages": len(pages),
            "analysis_ms_per_page": 1000 * analysis_seconds / len(pages),
            "cut_ms_per_page": cut["ms_per_page"],
            "cut_share_of_analysis": cut["ms_per_page"] * len(pages) / 1000 / analysis_seconds,
            "engine_pages_per_s_with": len(pages) / seconds["with"],
            "engine_pages_per_s_without": len(pages) / seconds["without"],
            "partials_share_of_engine": share,
            "state_bytes_per_page": kept["bytes"] / len(pages),
            "pairs": len(rows),
            "pair_events": events["with"] - events["without"],
            "dump_ms_per_pair": dump_ms,
            "worst_case_seconds": max(w["seconds"] for w in worst),
            "worst_case_peak_mb": max(w["peak_mb"] for w in worst),
        },
    }
    out = write_result(result, OUT_DIR, f"{n}p", args.out)
    f = result["figures"]
    print(f"pages                      {f['pages']:,}")
    print(f"cutting into sentences     {f['cut_ms_per_page']:.3f} ms a page "
          f"({cut['sentences_per_page']:.1f} sentences), {100 * f['cut_share_of_analysis']:.1f}% "
          f"of the analysis ({f['analysis_ms_per_page']:.2f} ms a page)")
    print(f"engine                     {f['engine_pages_per_s_with']:.1f} pages/s with "
          f"sentences, {f['engine_pages_per_s_without']:.1f} without: §7 is "
          f"{100 * share:.1f}% of the engine's time")
    kinds = ", ".join(f"{k} {v['bytes'] / len(pages):,.0f}"
                      for k, v in sorted(kept["by_kind"].items()))
    print(f"state                      {f['state_bytes_per_page']:,.0f} B a page ({kinds})")
    print(f"pairs                      {f['pairs']:,} ({f['pair_events']} pair events); dump "
          f"--partials {f['dump_ms_per_pair']:.2f} ms a pair")
    for w in worst:
        print(f"worst case {w['chars']:>10,} chars, {w['tokens']:,} tokens, {w['sentences']:,} "
              f"sentences: {w['seconds']:.2f} s, peak {w['peak_mb']:.0f} MB")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
