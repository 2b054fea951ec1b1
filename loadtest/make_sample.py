"""Build streamdet/sample/sample-crawl.jsonl.gz, the crawl `streamdet run` uses without --input.

    python -m loadtest.make_sample            # write the sample and its truth
    python -m loadtest.make_sample --check    # ... and run the detector on it

The sample is `--pages` small real pages (html of at most `--max-html` bytes and at least
`--min-words` words of visible text) and `--quilts` planted quilts from
`corpus.planted_corpus`, in a seeded shuffled order. So that the review desk's first
screens all show something, `--farm` of the quilts are moved onto one host (a farm: its
site has several pages, all quilted) and `--mirrors` real pages are copied onto a mirror
host with a line of their own (near-duplicate clusters). The output is deterministic: the same
arguments give the same bytes (gzip with mtime 0). The planted truth goes beside it in
sample-truth.json ({quilt_url: [donor urls]}; not packaged, for tests and people).

--check runs the embedded pipeline (in memory, default parameters) on the written file and
prints the recall of the planted quilts and every other page found quilted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from loadtest.corpus import load_pages, planted_corpus, write_jsonl
from streamdet.engine.analysis import page_text
from streamdet.engine.records import Page
from streamdet.engine.tokens import tokenize

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "streamdet" / "sample"
SAMPLE = SAMPLE_DIR / "sample-crawl.jsonl.gz"
TRUTH = SAMPLE_DIR / "sample-truth.json"


def small_pages(max_html: int, min_words: int) -> list[dict]:
    """Real pages small enough for the bundle, with enough visible text to matter."""
    out = []
    for rec in load_pages():
        if len(rec["html"].encode("utf-8")) > max_html:
            continue
        if len(tokenize(page_text(Page(url=rec["url"], html=rec["html"])))) < min_words:
            continue
        out.append(rec)
    return out


def farmed(records: list[dict], truth: dict, n: int) -> tuple[list[dict], dict]:
    """The first `n` quilts (by URL) moved onto the first one's host, their paths kept."""
    quilts = sorted(truth)[:n]
    if len(quilts) < 2:
        return records, truth
    host = urlsplit(quilts[0]).netloc
    moved = {q: urlunsplit(urlsplit(q)._replace(netloc=host)) for q in quilts[1:]}
    out = [dict(r, url=moved.get(r["url"], r["url"])) for r in records]
    return out, {moved.get(q, q): donors for q, donors in truth.items()}


def mirrored(records: list[dict], n: int, seed: int) -> list[dict]:
    """`n` real pages copied onto a mirror host, each with a line of its own: the copies
    are near-duplicates of their originals (SPEC §6), placed after them."""
    rng = random.Random(f"mirrors:{seed}")
    real = [r for r in records if "html" in r and "<body" in r["html"].lower()]
    out = list(records)
    for rec in rng.sample(real, min(n, len(real))):
        path = urlsplit(rec["url"]).path or "/"
        html = re.sub(r"(<body[^>]*>)", r"\1<p>Mirrored for offline reading.</p>", rec["html"],
                      count=1, flags=re.IGNORECASE)
        copy = {"url": f"https://mirror.readinglist.example{path}", "html": html}
        out.insert(out.index(rec) + 1 + rng.randrange(0, 5), copy)
    return out


def evaluate(path: str, truth: dict, params=None) -> dict:
    """Run the embedded pipeline on `path` in memory; recall and other quilted pages."""
    from streamdet.adapters.embedded import EmbeddedRunner
    from streamdet.adapters.inputs import open_source
    from streamdet.adapters.outputs import JsonlSink
    from streamdet.engine.params import Params
    from streamdet.reading.views import dump_rows
    from streamdet.state.kv import MemoryKV
    from streamdet.state.txn import Store

    params = params or Params()
    store = Store(MemoryKV())
    runner = EmbeddedRunner(store, params, JsonlSink(None), JsonlSink(None))
    summary = runner.run([open_source(path)])
    rows = {r["url"]: r for r in dump_rows(store)}
    found = {u for u, r in rows.items() if r["quilted"]}
    planted = set(truth)
    return {
        "pages": summary.pages,
        "dead": summary.dead_total,
        "events": dict(summary.events),
        "recall": len(found & planted) / len(planted) if planted else 1.0,
        "missed": {u: rows.get(u) for u in sorted(planted - found)},
        "planted": {u: rows.get(u) for u in sorted(planted)},
        "other_quilted": {u: rows[u] for u in sorted(found - planted)},
        "seconds": summary.seconds,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--pages", type=int, default=150, help="real pages (default 150)")
    ap.add_argument("--quilts", type=int, default=8, help="planted quilts (default 8)")
    ap.add_argument("--donors", type=int, nargs=2, default=(4, 10), metavar=("LO", "HI"))
    ap.add_argument("--farm", type=int, default=3, help="quilts on one host (default 3)")
    ap.add_argument("--mirrors", type=int, default=4, help="mirrored pages (default 4)")
    ap.add_argument("--max-html", type=int, default=45_000, help="largest html in bytes")
    ap.add_argument("--min-words", type=int, default=150, help="fewest visible tokens")
    ap.add_argument("--out", default=str(SAMPLE), help=f"output (default {SAMPLE})")
    ap.add_argument("--truth", default=None, help="truth JSON (default beside --out)")
    ap.add_argument("--check", action="store_true", help="run the detector on the result")
    args = ap.parse_args(argv)

    pool = small_pages(args.max_html, args.min_words)
    records, truth = planted_corpus(args.seed, args.pages, args.quilts, tuple(args.donors),
                                    pool=pool)
    records, truth = farmed(records, truth, args.farm)
    records = mirrored(records, args.mirrors, args.seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = write_jsonl(records, out)
    truth_path = Path(args.truth) if args.truth else out.parent / (
        out.name.replace("-crawl.jsonl.gz", "").replace(".jsonl.gz", "") + "-truth.json")
    truth_path.write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{out}: {n} records ({args.pages} real pages of {len(pool)} eligible, "
          f"{len(truth)} planted quilts), {os.path.getsize(out) / 1e6:.2f} MB; "
          f"truth in {truth_path}")
    if args.check:
        res = evaluate(str(out), truth)
        print(f"detector: {res['pages']} pages in {res['seconds']:.1f} s, "
              f"{res['dead']} dead letters, events {res['events']}")
        print(f"recall of planted quilts: {res['recall']:.2f} "
              f"({len(truth) - len(res['missed'])}/{len(truth)})")
        for u, row in res["planted"].items():
            mark = "ok    " if row and row["quilted"] else "MISSED"
            if row is None:
                print(f"  {mark} {u}: not in state")
                continue
            print(f"  {mark} pf={row['patch_fraction']:.2f} sources={len(row['sources'])} "
                  f"donors={len(truth[u])} {u}")
        print(f"other pages quilted: {len(res['other_quilted'])}")
        for u, row in res["other_quilted"].items():
            print(f"  pf={row['patch_fraction']:.2f} sources={len(row['sources'])} {u}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
