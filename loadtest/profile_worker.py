"""Where a Kafka worker's CPU goes under a backlog and when paced: bench_kafka's latency
setup (a fresh test broker, two `streamdet worker` processes, 4 shards), with py-spy on
the first worker's main process in each phase.

    python -m loadtest.profile_worker                      # 4,000 pages, paced at 8/s
    python -m loadtest.profile_worker --pages 6000 --rate 8 --out docs/benchmarks/profile.md

1. Backlog: the stream's first half is produced at once and the workers take it.
2. Paced: its second half is sent at `--rate` pages/s (bench_kafka's `_latency_run`,
   records stamped with `fetched_at`).

For each phase: the two workers' CPU (all their processes, from /proc) per page, the
latency of the paced phase, the rebalances their logs show (LOG_COUNTS), and a table of
the first worker's samples charged to a stage (the shard role whose step the thread is
in, or the analysis, or the event loop) and its innermost known part (STAGES, PARTS),
in ms of that worker's CPU per page of the phase: a part whose ms a page grows when paced
is a cost paid per round, not per page.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from loadtest.profile_run import emit, py_spy, samples

RATE = 50  # py-spy samples a second
STAGES = [("analysis", "analyze_payloads"), ("gram shard step", "Worker._gram_shard."),
          ("doc shard step", "Worker._doc_shard.")]
PARTS = [  # innermost first wins
    ("segment lookups", ("SegmentIndex.find", "SegmentIndex.maybe")),
    ("keyed tables (RocksDB multi-gets)", ("KeyedTable.get_many",)),
    ("site shard", ("SiteShard.process",)),
    ("commit", ("Txn.commit",)),
    ("other gram lookups", ("Txn.prefetch",)),
    ("deltas applied", ("DocRole.apply",)),
    ("re-scoring", ("rescore",)),
    ("partial duplicates", ("PartialRole.",)),
    ("clusters", ("cluster_events",)),
    ("messages decoded", ("Worker._decoded",)),
    ("outbox and its encoding", ("Step.commit",)),
    # a thread's samples include its waits for the GIL after a system call returns
    ("results handed to the event loop", ("BaseEventLoop.call_soon_threadsafe",)),
    ("epoll, and the GIL after it", ("EpollSelector.select",)),
    ("Kafka client", ("AIOKafka", "Fetcher.", "Sender.", "SendProduceReqHandler.")),
]
_FRAME = re.compile(r"^(\S+) \(")


def charge(frames: list[str]) -> tuple[str, str]:
    """(stage, part) of one sample's stack (thread first, root to leaf)."""
    names = [m.group(1) for f in frames[1:] if (m := _FRAME.match(f))]
    thread = frames[0]
    stage = next((s for s, fn in STAGES if any(n.startswith(fn) for n in names)), None)
    if stage is None:
        stage = "event loop (aiokafka)" if "MainThread" in thread else "engine thread, other"
    for name in reversed(names):
        for part, fns in PARTS:
            if name.startswith(fns):
                return stage, part
    return stage, "the rest"


def read(path: Path) -> Counter:
    out: Counter = Counter()
    for frames, n in samples(path):
        out[charge(frames)] += n
    return out


# what the workers' logs say of rebalances (a shard that moves to the other worker is
# rebuilt there from its partitions: engine.shard_opening, claim, then the replay), of rounds
# failed and joined again, and of fetches that skipped offsets (adapters.contiguity)
LOG_COUNTS = {"sessions expired": "member_id was not recognized",
              "shards replayed": ": replaying ", "doc shards taken over": ": taken over;",
              "rejoins": "leaving the group and joining it again",
              "fetch gaps": "missing from a fetch; reading again",
              "openings cut short": "opening cut short by a rebalance"}


def log_counts(pipe) -> dict[str, int]:
    """LOG_COUNTS over every worker's log so far."""
    text = "".join(p.read_text(encoding="utf-8", errors="replace")
                   for p in sorted(pipe.work.glob(f"{pipe.prefix}-w*.log")))
    return {name: text.count(needle) for name, needle in LOG_COUNTS.items()}


@contextlib.contextmanager
def _measured(pipe, raw: Path) -> Iterator[dict]:
    """py-spy on the first worker into `raw` over the block; the dict yielded gets the
    workers' CPU seconds and the rebalances their logs show meanwhile."""
    spy, cpu, logs, out = Spy(pipe.procs[0].pid, raw), pipe.cpu(), log_counts(pipe), {}
    try:
        yield out
        after = log_counts(pipe)
        out.update(cpu_s=pipe.cpu() - cpu, rebalances={k: after[k] - logs[k] for k in after})
    finally:
        spy.stop()


class Spy:
    """py-spy on one process until stopped (SIGINT makes it write what it sampled)."""

    def __init__(self, pid: int, out: Path) -> None:
        self.proc = subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--rate", str(RATE),
                                      "--format", "raw", "--threads", "--nonblocking",
                                      "--output", str(out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)


def phases(pages: int, rate: float, seed: int, work: Path) -> dict:
    from loadtest import bench_kafka as bk
    from loadtest.kafka_broker import broker_session, run_sync

    stream, warm, seg = work / "stream.jsonl", work / "warm.jsonl", work / "seg.jsonl"
    bk.make_stream(stream, pages, seed)
    n_warm, n_seg = bk.split_stream(stream, warm, seg)
    res: dict = {}
    with broker_session() as broker:
        pipe = bk.Pipeline(broker, work, "prof")
        try:
            pipe.produce(warm)
            pipe.start_workers(2)
            with _measured(pipe, work / "backlog.txt") as res["backlog"]:
                run_sync(bk.wait_done(pipe, n_warm))
            res["backlog"]["pages"] = n_warm
            records = bk.raw_records(seg)
            with _measured(pipe, work / "paced.txt") as res["paced"]:
                lat = run_sync(bk._latency_run(pipe, records, rate, None, n_warm + n_seg))
            res["paced"].update(pages=n_seg, rate=rate, p50_s=lat["p50_s"], p99_s=lat["p99_s"])
        finally:
            pipe.stop()
    for name in ("backlog", "paced"):
        res[name]["parts"] = {f"{s} / {p}": n / RATE
                              for (s, p), n in read(work / f"{name}.txt").items()}
    return res


def table(res: dict, top: int = 18) -> str:
    b, p = res["backlog"], res["paced"]
    ms = {k: {part: 1000 * s / r["pages"] for part, s in r["parts"].items()}
          for k, r in (("backlog", b), ("paced", p))}
    rows = sorted(set(ms["backlog"]) | set(ms["paced"]),
                  key=lambda k: -ms["paced"].get(k, 0.0))
    lines = [f"Both workers, all their processes: {1000 * b['cpu_s'] / b['pages']:.1f} ms of CPU "
             f"a page under a backlog ({b['pages']:,} pages sent at once), "
             f"{1000 * p['cpu_s'] / p['pages']:.1f} paced ({p['pages']:,} at {p['rate']:g} "
             f"pages/s: p50 {p['p50_s']:.2f} s, p99 {p['p99_s']:.2f} s).", "",
             *(f"Rebalances {phase}: " + ", ".join(f"{k} {v}" for k, v in r["rebalances"].items())
               + "." for phase, r in (("under the backlog", b), ("paced", p))
               if "rebalances" in r), "",
             "The first worker's main process, ms of CPU a page of the phase:", "",
             "| stage / part | backlog | paced | paced / backlog |", "|---|---:|---:|---:|"]
    for k in rows[:top]:
        x, y = ms["backlog"].get(k, 0.0), ms["paced"].get(k, 0.0)
        lines.append(f"| {k} | {x:.1f} | {y:.1f} | {y / x:.1f}x |" if x else
                     f"| {k} | {x:.1f} | {y:.1f} | |")
    tb, tp = sum(ms["backlog"].values()), sum(ms["paced"].values())
    lines.append(f"| all | {tb:.1f} | {tp:.1f} | " + (f"{tp / tb:.1f}x |" if tb else "|"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=4000)
    ap.add_argument("--rate", type=float, default=8.0, help="pages/s of the paced phase")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out", help="append the table to this file")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="streamdet-profile-worker-"))
    try:
        res = phases(args.pages, args.rate, args.seed, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1), encoding="utf-8")
    emit(table(res), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
