"""Python's cyclic garbage collector, tuned for a process that holds a large state.

A run keeps millions of Python objects alive for long (the decoded documents, the
postings and names caches), and allocates container objects at a high rate (a
transaction's dicts, tuples and lists per gram). With the default thresholds (a young
collection every 700 net allocations) the collector ran once per page and its cost grew
with the heap: measured in bench_growth's stream, 0.17 ms per page at 10,000 documents,
0.42 at 40,000 and 0.71 at 60,000 (gc.callbacks timing every collection), which was a
good part of why the engine's time per page grew with the state. The engine builds almost
no reference cycles (its objects go by reference counting), so the collector is asked to
run far less often: with thresholds (100000, 50, 100), 0.10-0.21 ms per page over the same
windows and process time at 50,000 documents 4.31 -> 3.75 ms per page. The full
collection is set to come 10x as often as in that measurement (about every 100,000 pages,
~1 s each): cycles that third-party code (asyncio, aiokafka) leaves are still reclaimed.
"""

from __future__ import annotations

import gc

# (young collection every N net container allocations, middle every M young ones, full
# every K middle ones: about every 10^8 allocations, or ~100,000 pages, in a run)
THRESHOLDS = (100_000, 50, 10)


def tune_collector() -> None:
    """Set the collector's thresholds for a long-running job (`run`, `worker`)."""
    gc.set_threshold(*THRESHOLDS)
