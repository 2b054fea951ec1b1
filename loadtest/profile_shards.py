"""Each shard's engine time a page in a paced Kafka pipeline, without a broker: where the
shards differ in load.

    python -m loadtest.profile_shards                     # 4,000 pages: 2,000 warm, 2,000 paced
    python -m loadtest.profile_shards --pages 12000 --warm 10000 --stream STREAM.jsonl

Two shards do work for every page of the pipeline beside their own: doc shard 0, the site
shard (engine.site_shard: site totals and neighbourhoods), and gram shard 0, the cluster
shard (engine.clusters). Under the range assignor both land on the same worker, so that
worker falls behind first when the machine is short of CPU (bench_kafka's latency step).

This runs the sharded pipeline of loadtest/sharded.py (the Kafka worker's own step,
engine.shard_step, on in-memory topics) with each shard's state in RocksDB, sized as a
worker sizes it under the default budget (adapters.worker.shard_budgets): the first
`--warm` pages in rounds of 70 (what a fetch under a backlog brings), then one page a
round, as a worker paced below its capacity takes them, every shard taking all of its
input each round. Each shard's steps are timed on the process clock, the site shard's
SiteShard.process apart. It prints ms a page per shard for each window of `--window`
paced pages, then a table of the paced phase: each shard, the site work, doc shard 0
against the other doc shards, and each of two workers' load under the range assignor.
The stream is bench_kafka's (`make_stream`: real pages with planted quilts); `--stream`
reuses one written before (20,000 pages are 5 GB). JSON to loadtest/out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from loadtest.bench_kafka import make_stream
from loadtest.host import machine
from loadtest.sharded import Simulation, analysed
from streamdet.adapters.worker import Shard, shard_budgets
from streamdet.engine import site_shard
from streamdet.engine.params import Params
from streamdet.state.budget import MemoryBudget

OUT = Path(__file__).resolve().parent / "out"
BACKLOG_ROUND = 70  # pages a round under a backlog (a fetch of ~6 MB: worker._fetch)
SITE = "site work"


class PacedPipeline(Simulation):
    """The tests' simulation with every shard taking all of its input at each step, no
    crash, and each shard's state a RocksDB directory."""

    def __init__(self, params: Params, shards: int, work: Path) -> None:
        super().__init__(params, shards, seed=0)
        memory, budgets = shard_budgets(MemoryBudget(), shards)  # a worker's, by default
        for kind, shards_of in (("doc", self.doc), ("gram", self.gram)):
            for sh in shards_of:
                sh.state = Shard(kind, sh.index, str(work / f"{kind}-{sh.index}"), params,
                                 shards, budgets[kind], memory)
        self.spent: dict[str, float] = defaultdict(float)

    def _take(self, topic: list[bytes], start: int) -> int:
        return len(topic)

    def step_pages(self, g: int) -> bool:
        q = self.queued[g]
        self.grams_topic[g].extend(raw for _, raw in q)
        sent = bool(q)
        q.clear()
        return sent

    def round(self) -> None:
        """Every shard takes all of its input, gram shards first, until none has any."""
        while True:
            moved = any([self.step_pages(g) for g in range(self.p)])
            for kind, step in (("g", self.step_gram), ("d", self.step_doc)):
                for i in range(self.p):
                    t = time.process_time()
                    moved |= step(i)
                    self.spent[f"{kind}{i}"] += time.process_time() - t
            if not moved:
                return

    def close(self) -> None:
        for sh in [*self.doc, *self.gram]:
            sh.state.close()


@contextlib.contextmanager
def site_timed(spent: dict[str, float]) -> Iterator[None]:
    """SiteShard.process timed into spent[SITE] while inside."""
    process = site_shard.SiteShard.process

    def timed(self, *args, **kwargs):
        t = time.process_time()
        try:
            return process(self, *args, **kwargs)
        finally:
            spent[SITE] += time.process_time() - t

    site_shard.SiteShard.process = timed
    try:
        yield
    finally:
        site_shard.SiteShard.process = process


def records(stream: Path) -> Iterator[dict]:
    with stream.open() as f:
        for line in f:
            yield json.loads(line)


def profile(stream: Path, pages: int, warm: int, window: int, shards: int,
            work: Path) -> dict:
    """Per window of paced pages, ms a page per shard (and the site work)."""
    params = Params()
    pipe = PacedPipeline(params, shards, work)
    windows: list[dict] = []
    total: dict[str, float] = defaultdict(float)
    try:
        with site_timed(pipe.spent):
            for n, rec in enumerate(records(stream), 1):
                if n > pages:
                    break
                for page in analysed([rec], params):
                    pipe.publish(page)
                if n <= warm:
                    if n % BACKLOG_ROUND == 0 or n == warm:
                        pipe.round()
                    if n == warm:
                        pipe.spent.clear()
                    continue
                pipe.round()
                if (n - warm) % window == 0:
                    windows.append({"pages": n, **{k: v * 1000 / window
                                                   for k, v in sorted(pipe.spent.items())}})
                    print(f"[profile-shards] {n} pages: " + " ".join(
                        f"{k} {v:.1f}" for k, v in windows[-1].items() if k != "pages"),
                        flush=True)
                    for k, v in pipe.spent.items():
                        total[k] += v
                    pipe.spent.clear()
    finally:
        pipe.close()
    paced = len(windows) * window
    return {"pages": pages, "warm": warm, "window": window, "shards": shards,
            "windows": windows,
            "ms_a_page": {k: v * 1000 / paced for k, v in sorted(total.items())} if paced else {}}


def summary(res: dict) -> str:
    """The paced phase's table: each shard's ms a page, the site work, doc shard 0 against
    the mean of the other doc shards, and two workers' loads under the range assignor."""
    ms, p = res["ms_a_page"], res["shards"]
    lines = [f"{res['pages'] - res['warm']:,} paced pages after {res['warm']:,} warm, "
             f"{p} shards, ms of engine CPU a page:", "", "| shard | ms a page |", "|---|---:|"]
    lines += [f"| {'doc' if k[0] == 'd' else 'gram'} shard {k[1:]} | {v:.1f} |"
              for k, v in ms.items() if k != SITE]
    lines.append(f"| of which the site work (doc shard {site_shard.SITE_SHARD}) | "
                 f"{ms.get(SITE, 0.0):.1f} |")
    others = [ms[f"d{s}"] for s in range(p) if s != site_shard.SITE_SHARD]
    if others:
        mean = sum(others) / len(others)
        lines.append(f"\nThe site shard: {ms[f'd{site_shard.SITE_SHARD}'] / mean:.2f}x the "
                     "mean of the other doc shards.")
    half = (p + 1) // 2
    loads = [sum(ms[f"{k}{i}"] for k in "dg" for i in part)
             for part in (range(half), range(half, p))]
    if loads[1]:
        lines.append(f"Two workers under the range assignor (shards 0–{half - 1} and "
                     f"{half}–{p - 1}): {loads[0]:.1f} and {loads[1]:.1f} ms a page "
                     f"({loads[0] / loads[1]:.2f}x).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=4000, help="pages of the stream to run")
    ap.add_argument("--warm", type=int, help="pages taken as a backlog first (half)")
    ap.add_argument("--window", type=int, default=500, help="paced pages a window")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--stream", type=Path, help="a stream make_stream wrote, to reuse")
    ap.add_argument("--smoke", action="store_true", help="60 pages, windows of 10 (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.pages, args.window = 60, 10
    warm = args.pages // 2 if args.warm is None else args.warm
    with tempfile.TemporaryDirectory(prefix="streamdet-profile-shards-") as tmp:
        work = Path(tmp)
        stream = args.stream
        if stream is None or not stream.exists():
            stream = stream or work / "stream.jsonl"
            make_stream(stream, args.pages, 0)
        (work / "states").mkdir()
        res = profile(stream, args.pages, warm, args.window, args.shards, work / "states")
    print(summary(res))
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"profile_shards-{args.pages}p-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps({"machine": machine(), "smoke": args.smoke, **res}))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
