"""Evidence benchmark (SPEC §5): what shares, spans and kept texts cost, and how well the
spans find the copied passages.

    python -m loadtest.bench_evidence                 # 1,800 real pages + 90 planted quilts
    python -m loadtest.bench_evidence --smoke         # for CI

In one process, on the engine over a RocksDB state in a temporary directory:

1. Stream: real pages with planted quilts (loadtest.corpus.planted_corpus: each quilt a
   title then passages of 4-12 donors, so where every copied passage lies is known).
2. Kept text: the visible texts packed as the analysis step packs them (ms a page, packed
   and visible bytes a page), and the bytes the state's `texts` table holds afterwards.
3. Engine: the pages in batches of 256 (analysed first, untimed); the time spent locating
   evidence for events (engine.evidence, timed around each call) against the engine's.
4. `dump`: ms a row, with the evidence of every source.
5. Span accuracy on the planted quilts that were flagged: characters of the union of the
   sources' spans against the union of the planted passages (precision, recall, and
   their overlap = |both| / |either|; target >= 0.95).
6. The worst case: locating spans in a text of EVIDENCE_MAX_CHARS code points and in a
   10 MB text (read up to that cap): seconds and peak traced memory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

from loadtest.host import machine, write_result

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
TARGET_OVERLAP = 0.95
BATCH = 256


def log(msg: str) -> None:
    print(f"[bench-evidence {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def analysed(records: list[dict], params) -> list:
    """The pages as the analysis processes make them (dead letters left out)."""
    from streamdet.adapters.payloads import analyze_payloads
    from streamdet.engine.records import DEFAULT_MAX_BODY

    return [a for a in analyze_payloads(records, params, DEFAULT_MAX_BODY)
            if not isinstance(a, tuple)]


def packing(pages: list) -> dict:
    """Packing the visible texts again, timed: what the analysis step adds a page."""
    from streamdet.engine.text import pack_text, unpack_text

    texts = [unpack_text(p.text) for p in pages]
    t = time.perf_counter()
    packed = [pack_text(x) for x in texts]
    seconds = time.perf_counter() - t
    return {"pages": len(texts), "ms_per_page": 1000 * seconds / len(texts),
            "packed_bytes_per_page": sum(map(len, packed)) / len(texts),
            "text_bytes_per_page": sum(len(x.encode()) for x in texts) / len(texts)}


def run_engine(store, pages: list, params) -> dict:
    """The stream through the engine, with the evidence calls timed."""
    from streamdet.engine import rescoring
    from streamdet.engine.core import Engine

    spent = {"seconds": 0.0, "calls": 0}
    located = rescoring.evidence

    def timed(*args):
        t = time.perf_counter()
        try:
            return located(*args)
        finally:
            spent["seconds"] += time.perf_counter() - t
            spent["calls"] += 1

    rescoring.evidence = timed
    engine, events = Engine(params), []
    try:
        t = time.perf_counter()
        for i in range(0, len(pages), BATCH):
            txn = store.begin()
            events += engine.process(txn, pages[i : i + BATCH])[0]
            txn.commit({})
            store.compact()
        seconds = time.perf_counter() - t
    finally:
        rescoring.evidence = located
    return {"seconds": seconds, "events": len(events), "evidence_seconds": spent["seconds"],
            "evidence_calls": spent["calls"],
            "evidence_ms_per_event": 1000 * spent["seconds"] / max(spent["calls"], 1),
            "evidence_share": spent["seconds"] / seconds}


def accuracy(rows: dict[str, dict], texts: dict[str, str], truth: dict) -> dict:
    """Characters of the reported spans against the planted passages, over the flagged
    planted quilts."""
    from loadtest.corpus import quilt_passages

    both = reported = planted = flagged = 0
    for url in truth:
        row = rows.get(url)
        if row is None or not row["quilted"]:
            continue
        flagged += 1
        text = texts[url]
        want: set[int] = set()
        at = 0
        for passage in quilt_passages(text):
            at = text.index(passage, at)
            want.update(range(at, at + len(passage)))
            at += len(passage)
        got = {i for s in row["sources"] for a, b in s["spans"] or () for i in range(a, b)}
        both += len(want & got)
        reported += len(got)
        planted += len(want)
    either = reported + planted - both
    return {"quilts_flagged": flagged, "planted_quilts": len(truth),
            "precision": both / reported if reported else 0.0,
            "recall": both / planted if planted else 0.0,
            "overlap": both / either if either else 0.0}


def worst_case(chars: int) -> dict:
    """Locating one source's spans in a text of `chars` code points of 6-character words
    (a gram set of a thousand of its windows): seconds, then peak traced memory."""
    import random

    from streamdet.engine.evidence import EVIDENCE_MAX_CHARS, source_spans
    from streamdet.engine.grams import gram_set
    from streamdet.engine.tokens import tokenize

    rng = random.Random(7)
    words = [f"w{i:04d}" for i in range(5000)]
    text = " ".join(rng.choice(words) for _ in range(chars // 6 + 1))[:chars]
    grams = gram_set(tokenize(text[:20000]), 5)[:1000]
    t = time.perf_counter()
    spans = source_spans(text, 5, [grams])
    seconds = time.perf_counter() - t
    tracemalloc.start()
    source_spans(text, 5, [grams])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"chars": len(text), "scanned_chars": min(len(text), EVIDENCE_MAX_CHARS),
            "seconds": seconds, "peak_mb": peak / 1e6, "spans": len(spans[0])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=1800, help="real pages (at most the 1,866 "
                    "of the sample), plus pages / 20 planted quilts")
    ap.add_argument("--quilts", type=int, help="planted quilts (default pages / 20)")
    ap.add_argument("--smoke", action="store_true", help="200 pages (CI)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    from loadtest.corpus import planted_corpus
    from streamdet.engine.evidence import EVIDENCE_MAX_CHARS
    from streamdet.engine.params import Params
    from streamdet.engine.text import unpack_text
    from streamdet.reading.views import dump_rows
    from streamdet.state.rocks import RocksKV, dir_bytes
    from streamdet.state.txn import Store

    n = 200 if args.smoke else args.pages
    quilts = args.quilts if args.quilts is not None else max(10, n // 20)
    params = Params()
    records, truth = planted_corpus(args.seed, n, quilts)
    log(f"stream: {len(records)} records, {len(truth)} planted quilts; analysing (untimed)")
    pages = analysed(records, params)
    texts = {p.url: unpack_text(p.text) for p in pages}
    packed = packing(pages)
    with tempfile.TemporaryDirectory(prefix="streamdet-evidence-") as tmp:
        store = Store(RocksKV(tmp))
        try:
            engine = run_engine(store, pages, params)
            log(f"engine: {len(pages) / engine['seconds']:.1f} pages/s, {engine['events']} "
                f"events, evidence {engine['evidence_ms_per_event']:.2f} ms an event")
            kept = sum(len(v) for _, v in store.kv.items("texts"))
            t = time.perf_counter()
            rows = {r["url"]: r for r in dump_rows(store, params)}
            dump_ms = 1000 * (time.perf_counter() - t) / max(len(rows), 1)
            disk = dir_bytes(tmp)
        finally:
            store.close()
    acc = accuracy(rows, texts, truth)
    worst = [worst_case(EVIDENCE_MAX_CHARS), worst_case(10_000_000)]
    result = {
        "benchmark": "bench_evidence",
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": machine(),
        "config": {"pages": n, "quilts": quilts, "seed": args.seed, "batch": BATCH,
                   "params": params.to_dict()},
        "packing": packed,
        "engine": engine,
        "accuracy": acc,
        "worst_case": worst,
        "figures": {
            "pages": len(pages),
            "pack_ms_per_page": packed["ms_per_page"],
            "kept_text_bytes_per_page": kept / len(rows),
            "kept_text_share_of_state": kept / disk,
            "evidence_ms_per_event": engine["evidence_ms_per_event"],
            "evidence_share_of_engine": engine["evidence_share"],
            "dump_ms_per_row": dump_ms,
            "span_overlap": acc["overlap"],
            "worst_case_seconds": max(w["seconds"] for w in worst),
            "worst_case_peak_mb": max(w["peak_mb"] for w in worst),
        },
        "targets": {"span_overlap": TARGET_OVERLAP},
        "pass": {"span_overlap": acc["overlap"] >= TARGET_OVERLAP},
    }
    out = write_result(result, OUT_DIR, f"{n}p", args.out)
    f = result["figures"]
    print(f"pages                      {f['pages']:,} ({len(truth)} planted quilts)")
    print(f"packing the text           {f['pack_ms_per_page']:.3f} ms a page; "
          f"{packed['packed_bytes_per_page']:,.0f} B packed of "
          f"{packed['text_bytes_per_page']:,.0f} B visible")
    print(f"kept texts in the state    {f['kept_text_bytes_per_page']:,.0f} B a page, "
          f"{100 * f['kept_text_share_of_state']:.1f}% of the state on disk")
    print(f"evidence for events        {f['evidence_ms_per_event']:.2f} ms an event "
          f"({engine['evidence_calls']} events), {100 * f['evidence_share_of_engine']:.1f}% "
          f"of the engine's {engine['seconds']:.1f} s")
    print(f"dump                       {f['dump_ms_per_row']:.2f} ms a row, with evidence")
    print(f"span accuracy              overlap {acc['overlap']:.3f} (precision "
          f"{acc['precision']:.3f}, recall {acc['recall']:.3f}) on {acc['quilts_flagged']} of "
          f"{acc['planted_quilts']} planted quilts flagged; target >= {TARGET_OVERLAP}  "
          f"{'ok' if result['pass']['span_overlap'] else 'MISSED'}")
    for w in worst:
        print(f"worst case {w['chars']:>10,} chars  {w['seconds']:.2f} s, peak "
              f"{w['peak_mb']:.0f} MB (scans the first {w['scanned_chars']:,})")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
