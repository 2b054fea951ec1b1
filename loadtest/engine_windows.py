"""Where the engine's cost a page grows: `streamdet run`'s pipeline in this process, with
the engine's thread CPU and the engine's counters printed every WINDOW pages.

    python -m loadtest.engine_windows --stream STREAM.jsonl --pages 12000 --every 1000

A stream comes from `python -m loadtest.bench_embedded --workdir DIR --keep`
(DIR/stream.jsonl). Each line is one window: pages so far; the engine's thread CPU a page
(everything the main thread does: reading, applying, committing; the analysis runs in its
own process); the batches' records (the batch sizer closes them sooner as the documents
they reach grow); and a page's documents re-scored, deltas applied to earlier documents,
and of those the additions a stale document left pending
(docs/rescoring.md#pending-additions). The per-page cost follows the deltas: each arrival
reaches the earlier documents that share its text, more of them as the stream holds more
copies. With --writes, a second line a window says what a page made the state write:
bytes and operations a page in all, and for the tables that wrote the most
(state.write_counts).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Window:
    pages: int
    cpu_ms_per_page: float
    records_per_batch: float
    rescored_per_page: float
    deltas_per_page: float
    deferred_per_page: float

    def line(self) -> str:
        return (f"{self.pages:8,d} pages  engine thread {self.cpu_ms_per_page:6.2f} ms/page  "
                f"batch {self.records_per_batch:5.0f}  rescored {self.rescored_per_page:6.1f}"
                f"  deltas {self.deltas_per_page:6.1f}  pending {self.deferred_per_page:6.1f}")


def writes_line(written: dict[str, tuple[int, int]], pages: int, top: int = 6) -> str:
    """What a page wrote to the state: in all, then the `top` tables by bytes."""
    ops = sum(o for o, _ in written.values())
    nbytes = sum(b for _, b in written.values())
    parts = [f"{t} {b / pages / 1024:.1f} KB/{o / pages:.0f}"
             for t, (o, b) in sorted(written.items(), key=lambda kv: -kv[1][1])[:top]]
    return (f"{'':8} writes a page {nbytes / pages / 1024:6.1f} KB in {ops / pages:5.0f} ops:"
            f"  {', '.join(parts)}")


class Windows:
    """on_batch callback of the embedded runner: closes a window every `every` pages;
    `written` (the state's KV.take_written) adds what each window wrote."""

    def __init__(self, every: int, limit: int | None,
                 written: Callable[[], dict[str, tuple[int, int]]] | None = None) -> None:
        self.every, self.limit, self.written = every, limit, written
        self.writes: list[dict[str, tuple[int, int]]] = []
        self.rows: list[Window] = []
        self._batches = 0
        # at the window's start: pages, batches, rescored, deltas, deferred, thread CPU
        self._start = (0, 0, 0, 0, 0, time.thread_time())

    def __call__(self, s) -> None:
        self._batches += 1
        pages0, batches0, rescored0, deltas0, deferred0, cpu0 = self._start
        n = s.pages - pages0
        if n < self.every:
            return
        now = time.thread_time()
        row = Window(s.pages, 1000 * (now - cpu0) / n, n / (self._batches - batches0),
                     (s.rescored - rescored0) / n, (s.deltas - deltas0) / n,
                     (s.deferred - deferred0) / n)
        self.rows.append(row)
        print(row.line(), flush=True)
        if self.written is not None:
            self.writes.append(self.written())
            print(writes_line(self.writes[-1], n), flush=True)
        self._start = (s.pages, self._batches, s.rescored, s.deltas, s.deferred, now)
        if self.limit is not None and s.pages >= self.limit:
            raise _Enough


class _Enough(Exception):
    """--pages reached: stop the run (its state is thrown away)."""


def run(stream: str, pages: int | None, every: int, memory: str, writes: bool = False
        ) -> Windows:
    from streamdet.adapters.allocator import tune_allocator
    from streamdet.adapters.analyzers import default_processes
    from streamdet.adapters.collector import tune_collector
    from streamdet.adapters.embedded import EmbeddedRunner
    from streamdet.adapters.inputs import DEFAULT_BATCH, open_source
    from streamdet.adapters.outputs import JsonlSink
    from streamdet.engine.params import Params
    from streamdet.state.budget import MemoryBudget
    from streamdet.state.rocks import RocksKV
    from streamdet.state.txn import Store

    tune_collector()  # as `streamdet run` does
    tune_allocator()
    processes = default_processes()
    budget = MemoryBudget.parse(memory).for_analysis(processes)
    with tempfile.TemporaryDirectory(prefix="streamdet-windows-") as tmp:
        store = Store(RocksKV(f"{tmp}/state", budget=budget), budget=budget)
        windows = Windows(every, pages, store.kv.take_written if writes else None)
        events, dead = JsonlSink(None), JsonlSink(None)
        try:
            EmbeddedRunner(store, Params(), events, dead, batch_size=DEFAULT_BATCH,
                           on_batch=windows, analyzers=processes, budget=budget
                           ).run([open_source(stream)])
        except _Enough:
            pass
        finally:
            store.close()
    return windows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stream", required=True, help="a JSONL stream (bench_embedded --keep)")
    ap.add_argument("--pages", type=int, help="stop after this many pages")
    ap.add_argument("--every", type=int, default=1000, help="pages a window (default 1000)")
    ap.add_argument("--memory", default="1GiB", help="--memory of the run (default 1GiB)")
    ap.add_argument("--writes", action="store_true",
                    help="also print what a page wrote to the state, per table")
    ap.add_argument("--json", help="also write the windows to this file")
    args = ap.parse_args(argv)
    windows = run(args.stream, args.pages, args.every, args.memory, args.writes)
    if args.json:
        rows = [r.__dict__ for r in windows.rows]
        for row, written in zip(rows, windows.writes, strict=False):  # no writes: none
            row["writes"] = {t: list(c) for t, c in written.items()}
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if windows.rows else 1


if __name__ == "__main__":
    sys.exit(main())
