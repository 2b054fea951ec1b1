"""One memory budget for a run or a worker (`--memory`, environment STREAMDET_MEMORY),
shared out among everything in it that is sized rather than fixed.

An operator runs streamdet for months beside a crawler and chooses its memory as one
number. What grows with the state is kept out of the process (the gram index's filters
and fences are mapped from segment files, state.segment_files; RocksDB's index and filter
blocks are read through its block cache), so what remains are caches and batches, each
sized from this budget, and the page analysis processes (adapters.watchdog). Those come
out first (`for_analysis`): each peaks near ~110-160 MB (the interpreter, numpy, lexbor, one
page's parse tree), of which ANALYSIS_PROCESS_BYTES are
charged to the budget; the engine's process shares out the rest:

| share | of what is shared out | what it holds |
|---|---|---|
| RocksDB block cache | 3/16 | data, index and filter blocks, and the memtables (charged to it) |
| of which memtables | 1/16 | writes not yet flushed, all column families together |
| documents | 3/16 | decoded documents kept between batches (state.doc_cache; 8-20 B a slot) |
| postings | 2/16 | overlay postings kept between batches (state.posting_cache, ~37 B each) |
| names | 1/64 | (server, URL) of document versions (~250 B each) |
| records | 4/16 | records of the batches in flight and their analysis (bytes read) |

The rest (about 1/4) is working memory of the batch in hand: the engine's arrays and
transaction, the pickled results coming back from the analysis process. Of it, 3/16 of
the budget bounds the documents a batch's transaction holds (`batch_slots`, at 72 B of
resident memory a slot): the embedded runner closes batches, and a worker its doc
shards' rounds, at fewer records when they held more (adapters.batch_sizer). Interpreters,
libraries and code (~100 MB a process) are outside the budget: with the default of one
analysis process, the 200 MB over the budget at which the benchmarks measure the peak
RSS of all of a run's processes (loadtest/bench_embedded.py, loadtest/bench_growth.py,
loadtest/bench_kafka.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..engine.documents import DOC_ROLE, DOC_SLOT_BYTES, GRAM_ROLE

DEFAULT_MEMORY = 1 << 30
MIN_MEMORY = 256 << 20  # below this the caches are too small to be worth having

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 1 << 10, "m": 10**6, "mb": 10**6,
          "mib": 1 << 20, "g": 10**9, "gb": 10**9, "gib": 1 << 30, "t": 10**12, "tb": 10**12,
          "tib": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

NAME_BYTES = 250  # a cached (server, URL) pair
# resident memory per slot of the documents a transaction holds (slots, pairs, the index
# of the unfolded ones, and what the allocators keep of them once freed): ~70 B a slot,
# the slope of a run's peak RSS against the slots its batches held; a little above it,
# so that every process of a run stays within its budget
HELD_SLOT_BYTES = 72
# an analysis process's peak RSS beyond an interpreter's ~100 MB: its compiled kernels are
# small, so what remains is the largest page's parse tree (~30 MB) and the batch it holds
ANALYSIS_PROCESS_BYTES = 64 << 20


def parse_bytes(text: str) -> int:
    """'1GiB', '512MB', '1.5G', '800000000' -> bytes (K/M/G/T are powers of 1000, KiB/MiB/
    GiB/TiB of 1024). Raises ValueError with the reason."""
    m = _SIZE.match(text or "")
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (say e.g. 1GiB, 512MB or 800000000)")
    return int(float(m.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class MemoryBudget:
    """`total` bytes, and what each sized part of a run gets of them."""

    total: int = DEFAULT_MEMORY

    @classmethod
    def parse(cls, text: str) -> MemoryBudget:
        """A budget of an operator's figure; ValueError when it is no size or too small."""
        total = parse_bytes(text)
        if total < MIN_MEMORY:
            raise ValueError(f"a memory budget below {MIN_MEMORY >> 20} MiB is too small "
                             f"(got {text})")
        return cls(total)

    def for_analysis(self, processes: int) -> MemoryBudget:
        """What is left to share out in the process that runs the engine once
        `processes` analysis processes are charged; at least a quarter of the budget, so
        a small budget with many processes still has caches (and runs over)."""
        return MemoryBudget(max(self.total // 4,
                                self.total - processes * ANALYSIS_PROCESS_BYTES))

    def shard_state(self, role: str, shards: int) -> ShardShare:
        """What one shard state of a worker gets of this budget: see ShardShare."""
        if role not in (DOC_ROLE, GRAM_ROLE):
            raise ValueError(f"no shard role {role!r}")
        return ShardShare(self.total, role, max(1, shards))

    @property
    def block_cache(self) -> int:
        """RocksDB's block cache, memtables included."""
        return self.total * 3 // 16

    @property
    def memtables(self) -> int:
        """All column families' memtables together (charged to the block cache)."""
        return self.total // 16

    @property
    def doc_slots(self) -> int:
        """Patch-gram slots of decoded documents kept between batches."""
        return self.total * 3 // 16 // DOC_SLOT_BYTES

    @property
    def postings(self) -> int:
        """Bytes of the overlay postings kept between batches (state.posting_cache)."""
        return self.total * 2 // 16

    @property
    def names(self) -> int:
        """(server, URL) pairs of document versions kept between batches."""
        return self.total // 64 // NAME_BYTES

    @property
    def batch_slots(self) -> int:
        """Slots of the documents one batch's transaction may hold, folded or not."""
        return self.total * 3 // 16 // HELD_SLOT_BYTES

    @property
    def records(self) -> int:
        """Bytes of records read and not yet applied, over all batches in flight."""
        return self.total * 4 // 16

    def batch_bytes(self, batches_in_flight: int) -> int:
        """Bytes at which a batch closes, when `batches_in_flight` are held at once."""
        return max(1 << 20, self.records // max(1, batches_in_flight))



@dataclass(frozen=True)
class ShardShare(MemoryBudget):
    """One shard state's part of a worker's budget (`total`: what the worker shares out
    among its shard states), for a pipeline of `shards` doc and `shards` gram shards.

    RocksDB's block cache and memtables are one for all of a worker's states
    (state.rocks.RocksMemory, of `total`'s shares): a worker that owns a few shards gives
    them the whole cache, and one that owns all of them stays within it. The engine's
    caches are per state, and each goes to the role that reads it: overlay postings to
    the gram shards, decoded documents to the doc shards, names to both, each state a
    1/shards part of the role's share, so that a worker that comes to own every shard
    keeps within its budget. An equal part of every share for every state would give a
    gram shard a documents cache it never fills and a doc shard postings it never reads,
    and the gram shards would read overlay postings back from RocksDB twice as often."""

    role: str = GRAM_ROLE
    shards: int = 1

    @property
    def memtables(self) -> int:
        """Sizes this state's tables' memtables; the shared write buffer manager bounds
        all states' together at the whole share."""
        return super().memtables // (2 * self.shards)

    @property
    def doc_slots(self) -> int:
        return super().doc_slots // self.shards if self.role == DOC_ROLE else 0

    @property
    def postings(self) -> int:
        return super().postings // self.shards if self.role == GRAM_ROLE else 0

    @property
    def names(self) -> int:
        return super().names // (2 * self.shards)
