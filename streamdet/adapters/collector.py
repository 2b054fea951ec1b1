"""Python's cyclic garbage collector, tuned for a process that holds a large state.

A run keeps millions of Python objects alive for long (the decoded documents, the
postings and names caches), and allocates container objects at a high rate (a
transaction's dicts, tuples and lists per gram). With the default thresholds (a young
collection every 700 net allocations) the collector runs about once per page, and each
run walks a heap that grows with the state: its cost per page grows with the documents
held, a good part of a per-page cost that would otherwise stay flat. The engine builds
almost no reference cycles (its objects go by reference counting), so the collector is
asked to run far less often, with thresholds (100000, 50, 100); the full collection
still comes about every 100,000 pages (~1 s each), so cycles that third-party code
(asyncio, aiokafka) leaves are reclaimed.
"""

from __future__ import annotations

import gc

# (young collection every N net container allocations, middle every M young ones, full
# every K middle ones: about every 10^8 allocations, or ~100,000 pages, in a run)
THRESHOLDS = (100_000, 50, 10)


def tune_collector() -> None:
    """Set the collector's thresholds for a long-running job (`run`, `worker`)."""
    gc.set_threshold(*THRESHOLDS)
