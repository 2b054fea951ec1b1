"""Make the slice of the real data the tests read (tests/data), from the full data set.

Tests never read ../shared: they read this slice, which is small enough to live in the
repository. Run from the repository root:

    python tests/data/make_slice.py [--source ../shared/data]

The output is deterministic (same source, same bytes): the pages are chosen by position,
kept in file order, and written with gzip's mtime set to 0.

Pages are taken from two strata, so that both of what the tests lean on are there:

- every SMALL_STEP-th page of at most SMALL_HTML characters of HTML: tests/cli_helpers.py
  builds its crawls from the first pages of that size (`real_pages`, `build_crawl` takes
  up to 220 of them);
- every LARGE_STEP-th page above that, up to LARGE_HTML characters: about half the real
  pages are larger than the first stratum's, and the benchmarks' smoke runs and the
  markup guard's test should see such pages too; the largest (megabytes of HTML) would
  not fit the size budget (about 5 MB for the slice).

The pages named in EXTRA are added wherever the strata leave them out. The WARC files
are copied as they are.

The main texts (wcxb-text) are sliced for `python -m loadtest.bench_spam --smoke`, which
builds its corpus of farms and natural reuse from them, in two strata too, both of texts
of at least TEXT_WORDS words (the least loadtest/spam_corpus.py uses): every
SHORT_TEXT_STEP-th text of at most SHORT_TEXT_WORDS words (the crawl, the farms' donors,
the articles) and every LONG_TEXT_STEP-th text of at least LONG_PARAGRAPHS paragraphs of
30 words or more and at most LONG_TEXT_WORDS words (the books and manuals); about 200 KB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGES_FILE = "wcxb-pages.jsonl.gz"
TEXT_FILE = "wcxb-text.jsonl.gz"
WARC_FILES = ("dolma-sample-0000.warc.gz", "dolma-sample-0001.warc.gz")
SMALL_HTML = 120_000  # cli_helpers.real_pages' default max_html
SMALL_STEP = 4
LARGE_HTML = 400_000
LARGE_STEP = 16
EXTRA = ("https:///wcxb-0551",)  # the record without a host: corpus.load_pages skips it
TEXT_WORDS = 300  # loadtest/spam_corpus.py's MIN_WORDS
SHORT_TEXT_WORDS = 600
SHORT_TEXT_STEP = 2
LONG_PARAGRAPHS = 16  # paragraphs of 30 words or more: a book's chapters, a manual's sections
LONG_TEXT_WORDS = 1500
LONG_TEXT_STEP = 12


def select(lines: list[bytes]) -> list[int]:
    """Indexes of the lines to keep, in file order."""
    keep: list[int] = []
    small = large = 0
    for i, line in enumerate(lines):
        obj = json.loads(line)
        size = len(obj["html"])
        if size <= SMALL_HTML:
            if small % SMALL_STEP == 0 or obj["url"] in EXTRA:
                keep.append(i)
            small += 1
        elif size <= LARGE_HTML:
            if large % LARGE_STEP == 0 or obj["url"] in EXTRA:
                keep.append(i)
            large += 1
        elif obj["url"] in EXTRA:
            keep.append(i)
    return keep


def select_texts(lines: list[bytes]) -> list[int]:
    """Indexes of the main texts to keep, in file order."""
    keep: list[int] = []
    short = long = 0
    for i, line in enumerate(lines):
        obj = json.loads(line)
        paragraphs = [p.split() for p in obj["text"].split("\n") if p.strip()]
        words = sum(len(p) for p in paragraphs)
        if not obj["url"].startswith("http") or words < TEXT_WORDS:
            continue
        if words <= SHORT_TEXT_WORDS:
            keep += [i] if short % SHORT_TEXT_STEP == 0 else []
            short += 1
        elif words <= LONG_TEXT_WORDS and sum(len(p) >= 30 for p in paragraphs) >= LONG_PARAGRAPHS:
            keep += [i] if long % LONG_TEXT_STEP == 0 else []
            long += 1
    return keep


def write_gz(path: Path, data: bytes) -> None:
    """gzip with no name and mtime 0, so the same lines give the same bytes."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                               mtime=0, compresslevel=9) as gz:
        gz.write(data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=HERE.parents[2] / "shared" / "data",
                    help="the full data directory (default: ../shared/data)")
    ap.add_argument("--out", type=Path, default=HERE, help="default: tests/data")
    args = ap.parse_args(argv)
    for name, chosen, what in ((PAGES_FILE, select, "pages"),
                               (TEXT_FILE, select_texts, "main texts")):
        with gzip.open(args.source / name, "rb") as f:
            lines = f.read().splitlines(keepends=True)
        keep = chosen(lines)
        write_gz(args.out / name, b"".join(lines[i] for i in keep))
        size = (args.out / name).stat().st_size
        print(f"{len(keep)} of {len(lines)} {what} -> {args.out / name} ({size:,} bytes)")
    for name in WARC_FILES:
        shutil.copyfile(args.source / name, args.out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
