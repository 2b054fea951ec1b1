"""Cost growth: engine time per page and bytes on disk as the durable state grows.

    python -m loadtest.bench_growth                  # 500,000 documents
    python -m loadtest.bench_growth --docs 30000     # a few minutes
    python -m loadtest.bench_growth --smoke          # 3,000 documents, for CI
    python -m loadtest.bench_growth --state S --keep # ... and keep the state
    python -m loadtest.bench_growth --state S --resume --docs 10000
                                                # 10,000 more documents on the kept state

A resumed run fast-forwards the stream past what the state holds and measures the next
windows: a change can be compared at 500,000 documents (on copies of one kept state) in
minutes instead of a new 2-hour build.

Why it is built this way. The question is whether the *state-dependent* work slows down as
the state grows (target: per-page time at 500 k documents <= 1.5x the time at 10 k).
Parsing html (~9 ms a page) does not depend on the state, and replayed records average
~260 KB of html, so a 500 k-page JSONL would be ~130 GB and take most of the run to parse.
So the pages are generated in this process, one batch at a time, at the level the engine
sees them (`Analyzed`: url, server, gram set), and only the engine is timed:

1. Model (not timed): each real page (loadtest.corpus, `--pool` of them, default all
   1,866) is analysed once. Its html is cut into markup and text nodes exactly as
   `corpus.replay_stream` cuts it, a marker word is put before and after each *content*
   node (>= 5 words: what replay_stream may vary), and the marked page goes through the
   engine's own `visible_text` and `tokenize`. This gives the page's token hashes
   (`grams.token_hashes`) and, per token, the content node it belongs to (or none: site
   template, menus, short labels).
2. Stream (timed separately, as generation): round r replays every page of the pool once,
   in replay_stream's order and under replay_stream's URLs (`www.s<r>-rei.com/...`: every
   round puts every site on a new registered domain, new URLs throughout). Each content
   node is varied with probability `--vary` (default 0.9, as bench_embedded) by replacing
   every third token (seeded offset) with a new random word, as replay_stream does in the
   html; a new word is represented directly by a random 64-bit token hash (a synthetic
   word's murmur hash is just as random, and no two collide). The gram set is then
   `grams.window_hashes` + `sorting.sorted_unique`, what `analysis.analyze` computes from
   such tokens. Template tokens are not varied, so boilerplate is shared across a
   site's pages and its mirrors while ~3/4 of a page's 5-grams are new (`--fidelity`).
   Mirror families (`--mirrors F`, default 10): replay_stream puts a new copy of every
   site on a new domain every round, so over 500 k documents (268 rounds of 1,866 pages)
   every page would gain 267 near-duplicates, each re-scoring all the earlier ones: the
   fan-out, and with it the cost per page, would grow with the *stream's* duplication,
   not with the state. So a site's replays form families of F consecutive rounds (each
   site with its own seeded phase) that share a vocabulary; the next family renames every
   word (token hashes XORed with a per-family salt, the same for all sites, so phrases
   shared across sites stay shared). Within a family the stream is replay_stream's over
   F rounds, about what bench_embedded's 20,000-page stream holds for F = 10; after the
   first F rounds (the warm-up, F x pool documents) the make-up of the stream no longer
   changes and only the state grows. `--mirrors 0` is replay_stream's structure without
   end (a stress case). `--refetch` (default 0.01 per new document) adds re-fetches: a
   URL seen earlier (uniformly) comes again with a new variation, so its old version is
   withdrawn, as in a crawl that revisits pages; they come on top of `--docs`.
3. Engine (timed): batches of up to `--batch` pages (default 256, the size of the
   published growth runs; `streamdet run` closes a batch at 512 records or 256 MB), and
   fewer once batches hold more documents than the budget gives one, by the batch sizer
   `streamdet run` uses, go through what
   streamdet/adapters/embedded.py does per batch: `Engine.process` in a `Store(RocksKV)`
   transaction, `commit`, then `Store.compact` (segment merges). Events are counted, not
   written.

At each checkpoint (`--checkpoint`, default every 10,000 new documents) it records, for the
window since the last one: engine ms per arrival (wall and main-thread CPU, split into
process / commit / compact), generation ms, wall pages/s, re-scoring fan-out per arrival
(BatchStats), the process's CPU (RocksDB's background flushes and compactions included);
and at the checkpoint: RSS, bytes on disk right after the batch commit (SST + WAL + rest:
RocksDB compacts in the background, so this lags and jumps; its own estimate of pending
compaction bytes is recorded beside it), segments, distinct grams (exact with
`--gram-sample 1`, else counted over the grams whose hash is 0 mod N and scaled: hashes
are uniform, so the error is ~1/sqrt(count/N)), bytes per distinct gram, and the share of
a page's grams no earlier document held; then, outside the window's figures, the seconds
`streamdet sites` takes to read the state's sites and neighbourhoods (SPEC §8). The
modelled pages have no paragraph chunks, so their neighbourhoods' badness is 0, but
their records are those of a real run of that size. The verdict (`judge`) reads the
target as the per-page time *at* 10 k documents against the time at the end: the mean ms/page of the
first SMOOTH windows that start once the stream's warm-up is over (with `--mirrors 5` the
warm-up ends at 9,330 documents, so they are the windows from 10 k on) against the mean of
the last SMOOTH windows, both by wall time and per VM speed, and it passes only if both
are within the target. Means, because a window with a big segment merge costs +50%; per VM
speed, because this VM runs up to 2x slower in some hours than in others. The first window
(0 to 10 k) is not the time at 10 k but the average from an empty state through the
stream's warm-up (fewer earlier pages to re-score); its ratio is printed beside, as
`growth` (literal). Then it prints a table, projects the wall time of
a `--project` (default 500 k) document run (at the last window's rate, and on a line
through the windows after the warm-up), and writes loadtest/out/bench_growth-*.json and
a PNG (ms/page and disk GB against documents).

`--fidelity N` (default 200) compares the model with the real thing on the first N
pages: grams per page and share of new grams of replay_stream's html through
`analysis.analyze` vs the model's, and how much of a real page's gram set the unvaried
model reproduces (Jaccard).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from loadtest import corpus
from loadtest.bench_embedded import git_revision, state_breakdown
from loadtest.growth_verdict import (
    TARGET_GROWTH,
    judge,
    stationary_growth,
)
from loadtest.host import MEMORY_SLACK, vm_speed
from streamdet.engine.analysis import Analyzed, analyze
from streamdet.engine.grams import token_hashes, window_hashes
from streamdet.engine.params import Params
from streamdet.engine.records import Page
from streamdet.engine.servers import server_of
from streamdet.engine.sorting import sorted_unique
from streamdet.engine.text import visible_text
from streamdet.engine.tokens import tokenize
from streamdet.state.budget import parse_bytes

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "loadtest" / "out"
SPEED_EVERY = 16  # batches between two samples of the VM's speed (~0.2 s each, untimed)
DEFAULT_MEMORY = "1GiB"  # streamdet's own default --memory
SMOKE = {"docs": 3000, "checkpoint": 1000, "pool": 300, "gram_sample": 1, "fidelity": 20}
MARK = "zqxjmark"  # marker words around content nodes (a token of their own)
_MARK_RE = re.compile(rf"{MARK}([be])(\d+){MARK}")
_REFETCH_STREAM = 0x5EF  # seed words of the re-fetch decisions and of family salts
_FAMILY_STREAM = 0xFA
POSITION = "bench_growth"  # the state's input position: arrivals applied
STREAM_META = "bench_growth_stream"  # the stream a state was built from (stream_config)


def log(msg: str) -> None:
    print(f"[bench-growth {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- page models ---------------------------------------------------------------------------


@dataclass
class PageModel:
    """A real page reduced to token hashes, with its varied tokens marked.

    scheme/prefix/domain/rest are what corpus.ReplayTemplate.url needs, so replay URLs are made
    by the corpus's own code. content_idx are the positions of tokens in content nodes,
    content_node their node, content_mod3 their position in the node mod 3."""

    index: int
    scheme: str
    prefix: str
    domain: str
    rest: tuple
    th: np.ndarray
    n_nodes: int
    content_idx: np.ndarray
    content_node: np.ndarray
    content_mod3: np.ndarray

    def url(self, r: int) -> str:
        return corpus.ReplayTemplate.url(self, r)  # type: ignore[arg-type] - same attributes


def marked_html(t: corpus.ReplayTemplate) -> str:
    """The page's html with a marker word before and after each content node."""
    parts = list(t.parts)
    for j, p in enumerate(t.content):
        parts[p] = f" {MARK}b{j}{MARK} {parts[p]} {MARK}e{j}{MARK} "
    return "".join(parts)


def split_marked(tokens: list[str]) -> tuple[list[str], list[int], list[int]]:
    """Tokens without the markers; per token its content node (-1: template) and its
    position inside that node."""
    keep: list[str] = []
    node: list[int] = []
    local: list[int] = []
    cur, pos = -1, 0
    for tok in tokens:
        if tok.startswith(MARK) and (m := _MARK_RE.fullmatch(tok)):
            cur, pos = (int(m[2]), 0) if m[1] == "b" else (-1, 0)
            continue
        keep.append(tok)
        node.append(cur)
        local.append(pos)
        pos += cur >= 0
    return keep, node, local


def page_model(i: int) -> PageModel:
    """Model of real page i (an index into the corpus's valid records)."""
    t = corpus._template(i)
    tokens, node, local = split_marked(tokenize(visible_text(marked_html(t))))
    node_a = np.asarray(node, dtype=np.int32)
    idx = np.flatnonzero(node_a >= 0).astype(np.int32)
    return PageModel(i, t.scheme, t.prefix, t.domain, t.rest, token_hashes(tokens),
                     len(t.content), idx, node_a[idx],
                     (np.asarray(local, dtype=np.int32)[idx] % 3).astype(np.int8))


def models_of(indexes: list[int]) -> list[PageModel]:
    return [page_model(i) for i in indexes]


def count_pages() -> int:
    return len(corpus._all_records(False))


def replay_grams(model: PageModel, rng: np.random.Generator | None, vary: float,
                 k: int, salt: np.uint64 | int = 0) -> np.ndarray:
    """Gram set of one replay: content nodes varied with probability `vary`, every third
    token (seeded offset) replaced by a new word; the other words renamed by `salt`."""
    th = model.th ^ salt if salt else model.th
    if rng is not None and vary > 0 and model.n_nodes:
        varied = rng.random(model.n_nodes) < vary
        off = rng.integers(0, 3, model.n_nodes, dtype=np.int8)
        node = model.content_node
        sel = model.content_idx[varied[node] & (model.content_mod3 == off[node])]
        th = th.copy() if th is model.th else th
        th[sel] = rng.bit_generator.random_raw(len(sel)).astype(np.uint64)
    return sorted_unique(window_hashes(th, k))


# -- the stream ----------------------------------------------------------------------------


def round_order(seed: int, r: int, n: int) -> list[int]:
    """replay_stream's visiting order of round r over n pages."""
    order = list(range(n))
    random.Random(f"replay-order:{seed}:{r}").shuffle(order)
    return order


def family_salt(seed: int, family: int) -> np.uint64:
    """What a mirror family's vocabulary is XORed with (family 0: the real words)."""
    if family == 0:
        return np.uint64(0)
    return np.random.SeedSequence([seed, _FAMILY_STREAM, family]).generate_state(1, np.uint64)[0]


class GrowthStream:
    """Arrivals: the pool replayed round after round on new domains, plus re-fetches.

    Mirror families (`mirrors` = F > 0): the replays of a site in rounds r with the same
    (r + phase of the site) // F share a vocabulary; the next family's vocabulary is the
    real one with every token renamed (token hashes XORed with the family's salt; all
    sites of a family rename alike, so boilerplate shared across sites stays shared). So
    a page has at most F - 1 earlier near-duplicates (as in bench_embedded's ~10-round
    stream for F = 10), phases spread families over the rounds, and after the first F
    rounds the gram popularity the engine sees no longer changes: what grows is the
    state. F = 0: one family, exactly replay_stream's structure, where every page gains
    a new mirror every round without end.

    Deterministic for (seed, vary, refetch, mirrors, pool): a replay depends only on
    (seed, round, page, version). `new_docs` and `arrivals` count what was yielded."""

    def __init__(self, models: list[PageModel], seed: int, vary: float, refetch: float,
                 params: Params, mirrors: int = 0) -> None:
        if not models:
            raise ValueError("no pages to replay")
        self.models, self.seed, self.vary, self.refetch = models, seed, vary, refetch
        self.params, self.mirrors = params, mirrors
        self._phase = [random.Random(f"growth-phase:{seed}:{m.domain}").randrange(mirrors)
                       if mirrors else 0 for m in models]
        self._salts: dict[int, np.uint64] = {}
        self._coin = np.random.default_rng([seed, _REFETCH_STREAM])
        self._seen: list[tuple[int, int]] = []  # (round, model) of every new document
        self._versions: Counter = Counter()
        self.new_docs = self.arrivals = 0
        self._arrivals = self._plan()

    def family(self, r: int, j: int) -> int:
        return (r + self._phase[j]) // self.mirrors if self.mirrors else 0

    def page(self, r: int, j: int, version: int = 0) -> Analyzed:
        """Replay `version` of pool page j in round r (0: the first fetch)."""
        model = self.models[j]
        rng = np.random.default_rng([self.seed, r, model.index, version])
        f = self.family(r, j)
        if f not in self._salts:
            self._salts[f] = family_salt(self.seed, f)
        url = model.url(r)
        grams = replay_grams(model, rng, self.vary, self.params.k, self._salts[f])
        return Analyzed(url, server_of(url, None, self.params.foreign), grams)

    def __iter__(self) -> Iterator[tuple[Analyzed, bool]]:
        """(page, is_refetch) forever, from where the stream stands."""
        for r, j, version in self._arrivals:
            yield self.page(r, j, version), version > 0

    def skip(self, arrivals: int) -> None:
        """Pass over `arrivals` arrivals without building their pages (~1 s per 100,000):
        what a resumed run does to continue a kept state where it stopped."""
        for _ in range(arrivals):
            next(self._arrivals)

    def _plan(self) -> Iterator[tuple[int, int, int]]:
        """(round, pool page, version) of every arrival, forever; the counters follow."""
        r = 0
        while True:
            for j in round_order(self.seed, r, len(self.models)):
                while self._seen and self._coin.random() < self.refetch:
                    rr, jj = self._seen[int(self._coin.integers(len(self._seen)))]
                    self._versions[rr, jj] += 1
                    self.arrivals += 1
                    yield rr, jj, self._versions[rr, jj]
                self._seen.append((r, j))
                self.new_docs += 1
                self.arrivals += 1
                yield r, j, 0
            r += 1


# -- distinct grams ------------------------------------------------------------------------


class GramCounter:
    """Distinct grams so far, over the grams whose hash is 0 mod `sample` (a power of two;
    1 = all, exact), and per window the share of page grams that no earlier page held."""

    def __init__(self, sample: int) -> None:
        if sample < 1 or sample & (sample - 1):
            raise ValueError(f"gram sample must be a power of two >= 1, got {sample}")
        self.sample = sample
        self._mask = np.uint64(sample - 1)
        self.seen = np.zeros(0, dtype=np.uint64)
        self._window: list[np.ndarray] = []
        self._occurrences = 0

    def add(self, grams: np.ndarray) -> None:
        kept = grams if self.sample == 1 else grams[(grams & self._mask) == 0]
        self._window.append(kept)
        self._occurrences += len(kept)

    def close_window(self) -> dict:
        """Fold the window into the total; its new-gram share and the distinct estimate."""
        w = sorted_unique(np.concatenate(self._window)) if self._window else self.seen[:0]
        pos = np.minimum(np.searchsorted(self.seen, w), max(len(self.seen) - 1, 0))
        old = self.seen[pos] == w if len(self.seen) else np.zeros(len(w), dtype=bool)
        new = w[~old]
        share = len(new) / self._occurrences if self._occurrences else float("nan")
        self.seen = np.sort(np.concatenate((self.seen, new)))
        self._window, self._occurrences = [], 0
        return {"distinct_grams": len(self.seen) * self.sample, "new_gram_share": share}


# -- measuring -----------------------------------------------------------------------------


@dataclass
class Window:
    """What happened between two checkpoints."""

    arrivals: int = 0
    new_docs: int = 0
    refetches: int = 0
    batches: int = 0
    grams: int = 0
    gen_s: float = 0.0
    process_s: float = 0.0
    commit_s: float = 0.0
    compact_s: float = 0.0
    engine_cpu_s: float = 0.0
    merges: int = 0
    rescored: int = 0
    went_common: int = 0
    fanout: list[int] = field(default_factory=list)
    events: Counter = field(default_factory=Counter)
    speeds: list[float] = field(default_factory=list)  # vm_speed samples (not timed)
    started: float = field(default_factory=time.perf_counter)
    cpu_started: float = field(default_factory=time.process_time)
    io_started: int = field(default_factory=lambda: storage_read_bytes())
    lookups_started: tuple[int, int, int] = (0, 0, 0)  # LookupCounts at the start

    @property
    def engine_s(self) -> float:
        return self.process_s + self.commit_s + self.compact_s


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def storage_read_bytes() -> int:
    """Bytes this process (all threads) had read from storage, not the page cache
    (Linux /proc/self/io; 0 elsewhere): reads of a state larger than the cache show here."""
    try:
        with open("/proc/self/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
        return int(fields["read_bytes"])
    except (OSError, KeyError, ValueError):
        return 0


def lookup_counts(store) -> tuple[int, int, int]:
    c = store.segments.counts
    return c.grams, c.chunk_reads, c.vain_reads


def rocks_pending_bytes(kv) -> int:
    """RocksDB's estimate of bytes its background compactions have yet to rewrite, over
    all column families (read-only use of the backend's handles): the disk figure lags
    by about this."""
    total = 0
    for cf in kv._cf.values():
        with contextlib.suppress(Exception):
            total += cf.property_int_value("rocksdb.estimate-pending-compaction-bytes") or 0
    return total


def window_row(w: Window, store, grams: dict | None, docs: int, arrivals: int) -> dict:
    """One checkpoint: the window's rates and the state's size right after a commit."""
    wall = time.perf_counter() - w.started
    n = max(w.arrivals, 1)
    disk = state_breakdown(Path(store.kv.path))
    fan = np.asarray(w.fanout or [0])
    looked, reads, vain = np.subtract(lookup_counts(store), w.lookups_started).tolist()
    row = {
        "documents": docs, "arrivals": arrivals, "window_arrivals": w.arrivals,
        "window_refetches": w.refetches, "batches": w.batches,
        "engine_ms_per_page": 1e3 * w.engine_s / n,
        "engine_cpu_ms_per_page": 1e3 * w.engine_cpu_s / n,
        "process_ms_per_page": 1e3 * w.process_s / n,
        "commit_ms_per_page": 1e3 * w.commit_s / n,
        "compact_ms_per_page": 1e3 * w.compact_s / n,
        "segment_merges": w.merges,
        "gen_ms_per_page": 1e3 * w.gen_s / n,
        "process_cpu_ms_per_page": 1e3 * (time.process_time() - w.cpu_started) / n,
        "wall_s": wall, "wall_pages_per_s": w.arrivals / wall if wall else float("nan"),
        "grams_per_page": w.grams / n,
        "fanout_mean": float(fan.mean()), "fanout_p99": float(np.percentile(fan, 99)),
        "fanout_max": int(fan.max()), "rescored_per_arrival": w.rescored / n,
        "went_common": w.went_common, "events": dict(w.events),
        "segment_lookups_per_page": looked / n, "chunk_reads_per_page": reads / n,
        "vain_chunk_reads_per_page": vain / n,
        "storage_read_kb_per_page": (storage_read_bytes() - w.io_started) / 1024 / n,
        "rss_bytes": rss_bytes(), "disk_bytes": disk["total"], "disk": disk,
        "rocks_pending_compaction_bytes": rocks_pending_bytes(store.kv),
        "segments": len(store.segments.segments), "segment_pairs": store.segments.pairs,
        "recent_pairs": store.recent.n,
        "segment_ram_bytes": store.segments.ram_bytes,
        "segment_mapped_bytes": store.segments.mapped_bytes,  # in segment files
        "overlay_cache_grams": len(store.postings), "doc_cache_docs": len(store.doc_cache),
        "dead_versions": len(store.withdrawn), "loadavg_1m": os.getloadavg()[0],
        "vm_speed_s": float(np.mean(w.speeds)) if w.speeds else vm_speed(),
    }
    if grams is not None:
        row.update(grams)
        row["bytes_per_distinct_gram"] = disk["total"] / max(grams["distinct_grams"], 1)
    return row


SITES_COMMAND_RUNS = 5


def sites_command(state: Path) -> dict:
    """`streamdet sites --top 20` on the final state (closed), as a user runs it: wall
    seconds of each of SITES_COMMAND_RUNS runs (imports and opening included); the
    first is the cold one."""
    cmd = [sys.executable, "-m", "streamdet", "sites", "--state", str(state), "--top", "20"]
    runs = []
    for _ in range(SITES_COMMAND_RUNS):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        runs.append(time.perf_counter() - t)
    return {"command": "streamdet sites --state STATE --top 20", "runs": runs,
            "first_seconds": runs[0], "median_seconds": statistics.median(runs)}


def sites_query(store, params: Params) -> dict:
    """`streamdet sites`' reading of the state (sites and neighbourhoods of 2 pages or
    more, SPEC §8), timed at the checkpoint, outside the window's figures."""
    from loadtest.bench_replication import sites_seconds

    seconds, sites, hoods = sites_seconds(store, params)
    return {"sites_seconds": seconds, "sites_rows": len(sites),
            "neighbourhood_rows": len(hoods)}


# -- the run -------------------------------------------------------------------------------


def apply_batch(engine, store, pages: list[Analyzed], w: Window, arrivals: int) -> int:
    """The per-batch work of adapters/embedded.py, timed by part (events counted only);
    the slots of the documents the batch held (for the batch sizer)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    txn = store.begin()
    events, stats = engine.process(txn, pages)
    t1 = time.perf_counter()
    txn.commit({POSITION: arrivals})
    t2 = time.perf_counter()
    w.merges += store.compact()
    w.compact_s += time.perf_counter() - t2
    w.commit_s += t2 - t1
    w.process_s += t1 - t0
    w.engine_cpu_s += time.thread_time() - c0
    w.batches += 1
    w.rescored += stats.rescored
    w.went_common += stats.went_common
    w.fanout.extend(stats.fanout or ())
    w.events.update(ev["event"] for ev in events)
    return stats.held_slots


def next_batch(it: Iterator[tuple[Analyzed, bool]], size: int, docs_left: int,
               w: Window) -> list[Analyzed]:
    """Up to `size` arrivals, stopping once `docs_left` new documents are in (re-fetches
    come on top), so that batches end exactly on checkpoints."""
    t = time.perf_counter()
    pages: list[Analyzed] = []
    new = 0
    while len(pages) < size and new < docs_left:
        page, refetch = next(it)
        pages.append(page)
        new += not refetch
        w.refetches += refetch
    w.gen_s += time.perf_counter() - t
    w.arrivals += len(pages)
    w.new_docs += new
    return pages


def stream_config(stream: GrowthStream) -> str:
    """What makes the stream (a resumed run must continue the same one)."""
    return json.dumps({"seed": stream.seed, "vary": stream.vary, "refetch": stream.refetch,
                       "mirrors": stream.mirrors, "pool": [m.index for m in stream.models],
                       "params": stream.params.to_dict()}, sort_keys=True)


def stream_difference(built: dict, this: dict) -> str:
    """What differs between the stream a state was built from and this run's, as the
    options that would make them the same (the pool and parameters only named)."""
    parts = []
    for key in sorted(built.keys() | this.keys()):
        a, b = built.get(key), this.get(key)
        if a == b:
            continue
        if key in ("seed", "vary", "refetch", "mirrors"):
            parts.append(f"--{key} {a} (this run: {b})")
        else:
            parts.append(f"its {key} differs")
    return "; ".join(parts)


def continue_stream(store, stream: GrowthStream) -> None:
    """Fast-forward the stream past the arrivals a kept state has applied, after checking
    that the state was built from this same stream."""
    applied = store.positions().get(POSITION)
    if applied is None:
        raise SystemExit("--resume: the state holds no bench_growth run to continue")
    built = store.meta(STREAM_META)
    if built is None:
        log("--resume: this state does not record its stream (made before resumable runs);"
            " trusting --seed/--vary/--refetch/--mirrors/--pool")
    elif built != stream_config(stream):
        raise SystemExit("--resume: the state was built from another stream: "
                         + stream_difference(json.loads(built),
                                             json.loads(stream_config(stream))))
    t = time.perf_counter()
    stream.skip(applied)
    log(f"resuming after {stream.new_docs:,} documents ({applied:,} arrivals; "
        f"skipped in {time.perf_counter() - t:.0f} s)")


def run(stream: GrowthStream, state: Path, docs: int, checkpoint: int, batch: int,
        counter: GramCounter | None, on_row=None, resume: bool = False,
        memory: str = DEFAULT_MEMORY) -> list[dict]:
    """Feed `docs` new documents through the engine on a fresh RocksDB state (or, to
    resume, on a kept one, continuing its stream) under a memory budget (`--memory`);
    one row per checkpoint."""
    from streamdet.adapters.allocator import release_free_memory, tune_allocator
    from streamdet.adapters.batch_sizer import BatchSizer
    from streamdet.adapters.collector import tune_collector
    from streamdet.adapters.state_format import EMBEDDED, check_state
    from streamdet.engine.core import Engine
    from streamdet.state.budget import MemoryBudget
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    collector = gc.get_threshold()
    tune_collector()  # as `streamdet run` does
    tune_allocator()
    budget = MemoryBudget.parse(memory)
    store = Store(RocksKV(str(state), budget=budget))
    rows: list[dict] = []
    try:
        check_state(store, EMBEDDED, stream.params, "this state directory")
        if resume:
            continue_stream(store, stream)
        else:
            store.set_meta(STREAM_META, stream_config(stream))
        docs += stream.new_docs
        engine = Engine(stream.params)
        sizer = BatchSizer(batch, budget.batch_slots)  # as `streamdet run` closes batches
        it = iter(stream)
        w = Window(lookups_started=lookup_counts(store))
        while stream.new_docs < docs:
            cp = min(docs, (stream.new_docs // checkpoint + 1) * checkpoint)
            pages = next_batch(it, sizer.records, cp - stream.new_docs, w)
            if counter is not None:
                for p in pages:
                    counter.add(p.grams)
            w.grams += sum(len(p.grams) for p in pages)
            sizer.observe(len(pages), apply_batch(engine, store, pages, w, stream.arrivals))
            del pages
            release_free_memory(budget.total)  # as `streamdet run` does after each batch
            if w.batches % SPEED_EVERY == 0:
                w.speeds.append(vm_speed())
            if stream.new_docs == cp:
                grams = counter.close_window() if counter is not None else None
                rows.append(window_row(w, store, grams, stream.new_docs, stream.arrivals)
                            | sites_query(store, stream.params))
                if on_row:
                    on_row(rows)
                w = Window(lookups_started=lookup_counts(store))
    finally:
        store.close()
        gc.set_threshold(*collector)
    return rows


# -- fidelity ------------------------------------------------------------------------------


def fidelity(models: list[PageModel], seed: int, vary: float, params: Params) -> dict:
    """The model against replay_stream's html through analysis.analyze, for these pages
    in round 0: grams per page, share of grams new w.r.t. the original page, and the
    Jaccard similarity of the unvaried model with the real page's gram set."""
    real_g = real_new = model_g = model_new = 0
    jac: list[float] = []
    for m in models:
        t = corpus._template(m.index)
        orig = analyze(Page(url="https://x.invalid/", html="".join(t.parts)), params).grams
        real = analyze(Page(url=m.url(0), html=t.html(
            random.Random(f"replay:{seed}:0:{m.index}"), vary)), params).grams
        base = replay_grams(m, None, 0.0, params.k)
        mine = replay_grams(m, np.random.default_rng([seed, 0, m.index, 0]), vary, params.k)
        real_g, model_g = real_g + len(real), model_g + len(mine)
        real_new += len(real) - int(np.isin(real, orig, assume_unique=True).sum())
        model_new += len(mine) - int(np.isin(mine, base, assume_unique=True).sum())
        union = len(np.union1d(base, orig))
        jac.append(len(np.intersect1d(base, orig, assume_unique=True)) / union if union else 1.0)
    k = max(len(models), 1)
    return {"pages": len(models), "vary": vary,
            "replay_stream_grams_per_page": real_g / k, "model_grams_per_page": model_g / k,
            "replay_stream_new_gram_share": real_new / max(real_g, 1),
            "model_new_gram_share": model_new / max(model_g, 1),
            "unvaried_model_jaccard_mean": float(np.mean(jac)) if jac else float("nan"),
            "unvaried_model_jaccard_min": float(np.min(jac)) if jac else float("nan")}


# -- figures -------------------------------------------------------------------------------


def project_seconds(rows: list[dict], docs: int, warmup_docs: int = 0) -> dict:
    """Wall seconds of a `docs`-document run: the measured windows, then the rest at the
    wall seconds per new document of (a) the last window ("flat": no further growth) and
    (b) a straight line fitted over the windows after the warm-up (None with fewer than
    two of them: a line through the warm-up says nothing of later; pessimistic when
    growth flattens). Also the line's engine ms/page at `docs`, and its ratio to the first
    window's.

    The line is fitted to the cost *without* segment merges, and the merges' mean cost
    over the fitted windows is added back: merges are lumpy (one window in four carries a
    big one and costs ~1.5x), and at a few windows one of them at the end tilted the
    line tenfold (40,000 documents projected 148 ms/page at 500 k; measured: 17)."""
    def new_docs(r: dict) -> int:
        return max(r["window_arrivals"] - r["window_refetches"], 1)

    def compact_s(r: dict) -> float:
        return r.get("compact_ms_per_page", 0.0) * r["window_arrivals"] / 1e3

    done, measured = rows[-1]["documents"], sum(r["wall_s"] for r in rows)
    end = max(docs, done)
    out = {"docs": docs,
           "seconds_flat": measured + rows[-1]["wall_s"] / new_docs(rows[-1]) * (end - done),
           "seconds_linear": None, "engine_ms_per_page_at_docs": None,
           "growth_at_docs": None, "fitted_windows": 0}
    fit = [r for r in rows if r["documents"] - r["window_arrivals"] >= warmup_docs * 0.999]
    if len(fit) < 2:
        return out
    x = np.asarray([r["documents"] - r["window_arrivals"] / 2 for r in fit], dtype=float)
    b, a = np.polyfit(x, [(r["wall_s"] - compact_s(r)) / new_docs(r) for r in fit], 1)
    merge_per_doc = sum(compact_s(r) for r in fit) / sum(new_docs(r) for r in fit)
    merge_ms = 1e3 * sum(compact_s(r) for r in fit) / sum(r["window_arrivals"] for r in fit)
    eb, ea = np.polyfit(x, [r["engine_ms_per_page"] - r.get("compact_ms_per_page", 0.0)
                            for r in fit], 1)
    at = float(ea + eb * end) + merge_ms
    rest = a * (end - done) + b * (end**2 - done**2) / 2 + merge_per_doc * (end - done)
    out.update(seconds_linear=measured + float(rest),
               engine_ms_per_page_at_docs=at, fitted_windows=len(fit),
               growth_at_docs=at / rows[0]["engine_ms_per_page"])
    return out


TABLE = ("{:>9} {:>9} {:>8} {:>8} {:>9} {:>8} {:>7} {:>7} {:>8} {:>8} {:>6} {:>5} {:>6}")


def print_table(rows: list[dict]) -> None:
    print(TABLE.format("docs", "arrivals", "eng ms/p", "cpu ms/p", "gen ms/p", "wall p/s",
                       "fanout", "resc/a", "RSS MiB", "disk MB", "B/gram", "new%", "ratio"))
    first = rows[0]["engine_ms_per_page"]
    for r in rows:
        bpg = r.get("bytes_per_distinct_gram")
        new = r.get("new_gram_share")
        print(TABLE.format(
            f"{r['documents']:,}", f"{r['arrivals']:,}", f"{r['engine_ms_per_page']:.2f}",
            f"{r['engine_cpu_ms_per_page']:.2f}", f"{r['gen_ms_per_page']:.2f}",
            f"{r['wall_pages_per_s']:.1f}", f"{r['fanout_mean']:.2f}",
            f"{r['rescored_per_arrival']:.2f}", f"{r['rss_bytes'] / 2**20:,.0f}",
            f"{r['disk_bytes'] / 1e6:,.1f}", "-" if bpg is None else f"{bpg:.1f}",
            "-" if new is None else f"{100 * new:.0f}",
            f"{r['engine_ms_per_page'] / first:.2f}" if first else "-"))


def plot(result: dict, png: Path) -> None:
    """ms/page (engine wall and CPU) and disk GB against documents."""
    from loadtest.host import pyplot

    plt = pyplot()

    rows = result["checkpoints"]
    x = [r["documents"] for r in rows]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    a1.plot(x, [r["engine_ms_per_page"] for r in rows], "o-", label="engine (wall)")
    a1.plot(x, [r["engine_cpu_ms_per_page"] for r in rows], "s--", label="engine (CPU)")
    for key, style in (("process", "-"), ("commit", "-."), ("compact", ":")):
        a1.plot(x, [r[f"{key}_ms_per_page"] for r in rows], style, lw=1,
                label=f"  of which {key}")
    st = result["figures"].get("stationary")
    if st:  # the judged reference: the mean of the first windows after the warm-up
        i = next(i for i, r in enumerate(rows) if r["documents"] == st["from_documents"])
        n = st["windows_averaged"]
        base = sum(r["engine_ms_per_page"] for r in rows[i : i + n]) / n
        a1.axhline(TARGET_GROWTH * base, color="r", lw=0.8, ls="--",
                   label=f"target: {TARGET_GROWTH}x the mean of the first {n} windows "
                         "after the warm-up")
    else:
        a1.axhline(TARGET_GROWTH * rows[0]["engine_ms_per_page"], color="r", lw=0.8,
                   label=f"target: {TARGET_GROWTH}x the first window")
    a1.set_ylabel("ms per page (window)")
    a1.set_ylim(bottom=0)
    a1.legend(fontsize=8)
    a1.set_title(f"streamdet cost growth ({result['git']}, {result['at']})", fontsize=10)
    a2.plot(x, [r["disk_bytes"] / 1e9 for r in rows], "o-", label="state on disk")
    a2.set_ylabel("GB on disk")
    a2.set_xlabel("documents in state")
    a2.set_ylim(bottom=0)
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def host_info(load_start: tuple) -> dict:
    from loadtest.host import machine

    return {**machine(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()}


# -- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=500_000, help="new documents (default 500000)")
    ap.add_argument("--checkpoint", type=int, default=10_000,
                    help="documents per window (default 10000)")
    ap.add_argument("--smoke", action="store_true",
                    help=f"CI size: {SMOKE['docs']:,} documents, checkpoints of "
                    f"{SMOKE['checkpoint']:,}, {SMOKE['pool']} real pages, exact gram count")
    ap.add_argument("--batch", type=int, default=256, help="pages per batch (default 256)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vary", type=float, default=0.9,
                    help="share of content nodes varied per replay (default 0.9)")
    ap.add_argument("--refetch", type=float, default=0.01,
                    help="re-fetches per new document (default 0.01)")
    ap.add_argument("--mirrors", type=int, default=10,
                    help="rounds per mirror family (default 10; 0: no families, every page "
                    "gains a mirror every round, replay_stream's structure)")
    ap.add_argument("--pool", type=int, default=None,
                    help="real pages replayed (default all; a seeded sample otherwise)")
    ap.add_argument("--memory", default=DEFAULT_MEMORY,
                    help=f"the state's memory budget, as streamdet's --memory (default "
                    f"{DEFAULT_MEMORY})")
    ap.add_argument("--gram-sample", type=int, default=256,
                    help="count distinct grams over hashes 0 mod N (1: exact; 0: skip)")
    ap.add_argument("--fidelity", type=int, default=200,
                    help="pages to compare the model with replay_stream on (0: skip)")
    ap.add_argument("--project", type=int, default=500_000,
                    help="documents to project the wall time of (default 500000)")
    ap.add_argument("--state", help="state directory, empty or absent (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the state directory")
    ap.add_argument("--resume", action="store_true",
                    help="continue the kept state in --state for --docs more documents "
                    "(same stream options as the run that built it; the state is changed, "
                    "so copy it first to compare several runs from one point)")
    ap.add_argument("--out", help="result JSON (default loadtest/out/bench_growth-*.json); "
                    "the PNG goes beside it")
    ap.add_argument("--enforce", action="store_true",
                    help="exit 1 when the growth target is missed")
    args = ap.parse_args(argv)
    if args.smoke:
        args.docs, args.checkpoint = SMOKE["docs"], SMOKE["checkpoint"]
        args.pool, args.gram_sample = SMOKE["pool"], SMOKE["gram_sample"]
        args.fidelity = min(args.fidelity, SMOKE["fidelity"])
    if args.resume and not args.state:
        ap.error("--resume needs --state (a state kept by an earlier run, with --keep)")
    if args.docs < 1 or args.checkpoint < 1 or args.batch < 1:
        ap.error("--docs, --checkpoint and --batch must be >= 1")
    if not 0.0 <= args.vary <= 1.0 or not 0.0 <= args.refetch < 1.0 or args.mirrors < 0:
        ap.error("--vary must be within [0, 1], --refetch within [0, 1), --mirrors >= 0")
    from streamdet.state.budget import MemoryBudget

    try:
        MemoryBudget.parse(args.memory)
    except ValueError as exc:
        ap.error(f"--memory: {exc}")
    return args


def pool_indexes(n_real: int, pool: int | None, seed: int) -> list[int]:
    """All valid real pages, or a seeded sample of `pool` of them (in corpus order)."""
    if pool is None or pool >= n_real:
        return list(range(n_real))
    return sorted(random.Random(f"growth-pool:{seed}").sample(range(n_real), pool))


def prepare(args: argparse.Namespace, params: Params) -> tuple[list[PageModel], dict]:
    """Models of the pool, and the fidelity check, made in child processes: the html
    (~1 GB as Python strings) never enters this process, so the RSS measured is the
    engine's plus ~100 MB of models."""
    t = time.perf_counter()
    procs = min(2, os.cpu_count() or 1)
    with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("fork"),
                             initializer=count_pages) as ex:  # each loads the pages at once
        indexes = pool_indexes(ex.submit(count_pages).result(), args.pool, args.seed)
        log(f"modelling {len(indexes):,} real pages (analysed once, not timed)")
        chunks = [indexes[i:i + 64] for i in range(0, len(indexes), 64)]
        models = [m for chunk in ex.map(models_of, chunks) for m in chunk]
        order = round_order(args.seed, 0, len(models))[:args.fidelity]
        fid = ex.submit(fidelity, [models[j] for j in order], args.seed, args.vary,
                        params).result() if args.fidelity else {}
    info = {"pages": len(models), "seconds": time.perf_counter() - t,
            "tokens_per_page": float(np.mean([len(m.th) for m in models])),
            "model_bytes": sum(m.th.nbytes + m.content_idx.nbytes * 2 + m.content_mod3.nbytes
                               for m in models)}
    log(f"modelled in {info['seconds']:.0f} s: {info['tokens_per_page']:.0f} tokens/page; "
        + (f"fidelity: {fid['model_grams_per_page']:.0f} vs "
           f"{fid['replay_stream_grams_per_page']:.0f}"
           f" grams/page, new {fid['model_new_gram_share']:.0%} vs "
           f"{fid['replay_stream_new_gram_share']:.0%} (model vs replay_stream)" if fid else ""))
    return models, {"model": info, "fidelity": fid}


def fresh_state(arg: str | None) -> Path:
    if arg is None:
        return Path(tempfile.mkdtemp(prefix="streamdet-growth-"))
    p = Path(arg)
    if p.exists() and any(p.iterdir()):
        raise SystemExit(f"--state {p} is not empty: the benchmark needs a fresh state")
    p.mkdir(parents=True, exist_ok=True)
    return p


def progress_line(rows: list[dict]) -> str:
    """The checkpoint's figures on one line, so a run watched (or cut short) shows them
    as they come: ms/page over the last window, disk, bytes per distinct gram, RSS."""
    r = rows[-1]
    bpg = r.get("bytes_per_distinct_gram")
    return (f"{r['documents']:,} docs: engine {r['engine_ms_per_page']:.2f} ms/page "
            f"({r['engine_ms_per_page'] / rows[0]['engine_ms_per_page']:.2f}x first; "
            f"process {r['process_ms_per_page']:.2f}, commit {r['commit_ms_per_page']:.2f}, "
            f"compact {r['compact_ms_per_page']:.2f}), fan-out {r['fanout_mean']:.1f}, "
            f"{r['wall_pages_per_s']:.0f} pages/s wall, disk {r['disk_bytes'] / 1e6:,.0f} MB"
            + ("" if bpg is None else f" ({bpg:.1f} B/gram)")
            + f", RSS {r['rss_bytes'] / 2**20:,.0f} MiB, VM speed {r['vm_speed_s']:.3f} s"
            + f"; chunk reads/page {r['chunk_reads_per_page']:.0f} "
            f"({r['vain_chunk_reads_per_page']:.0f} in vain, {r['segments']} segments), "
            f"storage reads {r['storage_read_kb_per_page']:.0f} KB/page; `sites` "
            f"{r['sites_seconds']:.2f} s ({r['sites_rows']:,} sites, "
            f"{r['neighbourhood_rows']:,} neighbourhoods)")


def progress(rows: list[dict]) -> None:
    log(progress_line(rows))


def write_result(result: dict, out: Path) -> None:
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    plot(result, out.with_suffix(".png"))


def result_doc(args, params, prep, rows, load_start, setup_s, run_s,
               partial: bool = False) -> dict:
    growth = rows[-1]["engine_ms_per_page"] / rows[0]["engine_ms_per_page"]
    warmup = args.mirrors * prep["model"]["pages"]
    figures = {"documents": rows[-1]["documents"], "arrivals": rows[-1]["arrivals"],
               "first_ms_per_page": rows[0]["engine_ms_per_page"],
               "last_ms_per_page": rows[-1]["engine_ms_per_page"], "growth": growth,
               "warmup_documents": warmup,
               "stationary": stationary_growth(rows, warmup),
               "disk_bytes": rows[-1]["disk_bytes"],
               "sites_seconds": rows[-1].get("sites_seconds"),
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "memory_budget_bytes": parse_bytes(args.memory),
               # what the benchmark itself holds beside streamdet: the page models and the
               # distinct-gram sample (both in this one process)
               "bench_bytes": prep["model"]["model_bytes"] + (
                   rows[-1].get("distinct_grams") or 0) // max(1, args.gram_sample) * 8}
    return {
        "benchmark": "bench_growth",
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": args.git,  # taken at the start: a long run outlives commits
        "host": host_info(load_start),
        "config": {"docs": args.docs, "checkpoint": args.checkpoint, "batch": args.batch,
                   "seed": args.seed, "vary": args.vary, "refetch": args.refetch,
                   "mirrors": args.mirrors, "resumed_from": (
                       rows[0]["documents"] - rows[0]["window_arrivals"]
                       + rows[0]["window_refetches"] if args.resume else 0),
                   "pool": prep["model"]["pages"], "gram_sample": args.gram_sample,
                   "params": params.to_dict(), "smoke": args.smoke},
        **prep,
        "setup_seconds": setup_s, "run_seconds": run_s,
        "partial": partial,  # True while running: figures up to the last checkpoint
        "checkpoints": rows,
        "figures": figures,
        "projection": project_seconds(rows, args.project, warmup),
        "target": {"growth": TARGET_GROWTH,
                   "peak_rss_bytes": figures["memory_budget_bytes"] + MEMORY_SLACK},
        "pass": judge(figures) | {
            "peak_rss": figures["peak_rss_bytes"] <= figures["memory_budget_bytes"]
            + MEMORY_SLACK},
    }


def report(result: dict) -> None:
    f, p = result["figures"], result["projection"]
    print_table(result["checkpoints"])
    verdict = result["pass"]
    print(f"growth (ms/page last / first window)  {f['growth']:.2f} (literal: the first "
          "window holds the warm-up)")
    print(f"target <= {TARGET_GROWTH}, judged on the {verdict['judged_on']}: "
          f"{'ok' if verdict['growth'] else 'MISSED'}"
          + ("  (windows too small to judge)" if result["config"]["smoke"] else ""))
    st = f["stationary"]
    print(f"mirror families full after {f['warmup_documents']:,} docs; "
          + (f"growth from the {st['from_documents']:,} window on: {st['growth']:.2f} "
             f"({st['growth_of_means']:.2f} for the means of the first and last "
             f"{st['windows_averaged']} windows"
             + (f"; {st['growth_of_means_per_vm_speed']:.2f} per VM speed"
                if "growth_of_means_per_vm_speed" in st else "") + ")" if st
             else "no two windows after that to compare"))
    print(f"projection for {p['docs']:,} docs     {p['seconds_flat'] / 3600:.2f} h wall at the "
          f"last window's rate (+{result['setup_seconds']:.0f} s setup)"
          + (f"; {p['seconds_linear'] / 3600:.2f} h on a line through the "
             f"{p['fitted_windows']} windows after warm-up, which gives "
             f"{p['engine_ms_per_page_at_docs']:.2f} ms/page there ({p['growth_at_docs']:.2f}x)"
             if p["seconds_linear"] is not None else ""))
    fid = result["fidelity"]
    if fid:
        print(f"model vs replay_stream ({fid['pages']} pages): grams/page "
              f"{fid['model_grams_per_page']:.0f} vs {fid['replay_stream_grams_per_page']:.0f},"
              f" new-gram share {fid['model_new_gram_share']:.1%} vs "
              f"{fid['replay_stream_new_gram_share']:.1%}; unvaried model Jaccard "
              f"{fid['unvaried_model_jaccard_mean']:.3f} (min "
              f"{fid['unvaried_model_jaccard_min']:.3f})")
    h = result["host"]
    if f.get("sites_seconds") is not None:
        last = result["checkpoints"][-1]
        print(f"`sites` at {f['documents']:,} documents: {f['sites_seconds']:.2f} s "
              f"({last['sites_rows']:,} sites and {last['neighbourhood_rows']:,} "
              "neighbourhoods of 2 pages or more; target < 1 s)")
    if f.get("sites_command"):
        c = f["sites_command"]
        print(f"`{c['command']}`: {c['median_seconds']:.2f} s (median of "
              f"{len(c['runs'])}; the first {c['first_seconds']:.2f} s)")
    budget = f.get("memory_budget_bytes")
    if budget:
        print(f"peak RSS {f['peak_rss_bytes'] / 2**20:,.0f} MiB under --memory "
              f"{budget / 2**20:,.0f} MiB (target <= budget + {MEMORY_SLACK >> 20} MiB: "
              f"{'ok' if result['pass'].get('peak_rss') else 'MISSED'}; the benchmark's own "
              f"models and gram sample {f.get('bench_bytes', 0) / 2**20:,.0f} MiB of it)")
    print(f"peak RSS {f['peak_rss_bytes'] / 2**20:,.0f} MiB; load average start/end "
          f"{h['loadavg_start'][0]:.2f} / {h['loadavg_end'][0]:.2f} on {h['cpus']} CPUs "
          f"({h['cpu_model']})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.git = git_revision()
    params = Params()
    load_start = os.getloadavg()
    t = time.perf_counter()
    models, prep = prepare(args, params)
    setup_s = time.perf_counter() - t
    state = Path(args.state) if args.resume else fresh_state(args.state)
    # distinct grams are counted from the stream's start: not for a resumed run
    counter = GramCounter(args.gram_sample) if args.gram_sample and not args.resume else None
    stream = GrowthStream(models, args.seed, args.vary, args.refetch, params, args.mirrors)
    log(f"{args.docs:,} documents, checkpoint every {args.checkpoint:,}, state {state}")
    t = time.perf_counter()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    # a resumed run is a probe of a kept state, never the figure report.py publishes
    name = "bench_growth_resumed" if args.resume else "bench_growth"
    out = Path(args.out) if args.out else OUT_DIR / f"{name}-{args.docs}d-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def checkpoint(rows: list[dict]) -> None:
        """Progress line, and the result so far on disk: a long run stopped early (or
        killed) still leaves its figures up to its last checkpoint."""
        progress(rows)
        write_result(result_doc(args, params, prep, rows, load_start, setup_s,
                                time.perf_counter() - t, partial=True), out)

    try:
        rows = run(stream, state, args.docs, args.checkpoint, args.batch, counter, checkpoint,
                   resume=args.resume, memory=args.memory)
        run_s = time.perf_counter() - t
        command = sites_command(state)
    finally:
        if not args.keep and not args.resume:
            shutil.rmtree(state, ignore_errors=True)
    result = result_doc(args, params, prep, rows, load_start, setup_s, run_s)
    result["figures"]["sites_command"] = command
    write_result(result, out)
    report(result)
    print(f"wrote {out} and {out.with_suffix('.png').name}")
    return 1 if args.enforce and not result["pass"]["growth"] else 0


if __name__ == "__main__":
    sys.exit(main())
