"""RocksDB backend (rocksdict), tuned for the gram index.

One column family per table, so each gets options for its own access pattern:
- `grams` holds one fixed 8-byte key per gram, written once and looked up by exact key.
  A hash-linked-list memtable keyed by the whole key (fixed 8-byte prefix) inserts ~7x
  faster than the default skiplist, and a 10-bit bloom filter per SST makes lookups of
  absent grams (most grams are new) cheap.
- the other tables hold a few keys per document and keep the default skiplist, so they
  can be iterated in key order (`dump` walks `urls` sorted by URL).
rocksdict silently ignores table options on reopening unless they are passed per column
family, so they always are (see shared/notes/performance-here.md).

Memory is one budget (state.budget): the block cache holds data blocks, and also the index
and filter blocks (partitioned, under a two-level index whose top level stays pinned), so
that what SST files' readers keep does not grow with the state; the memtables are charged
to the same cache by a write buffer manager.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from rocksdict import (
    AccessType,
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    MemtableFactory,
    Options,
    Rdict,
    ReadOptions,
    SliceTransform,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from .budget import MemoryBudget
from .kv import KV, TABLES, DeleteRange, Op
from .write_counts import WriteCounts

# of the memtables' share of the budget (budget.memtables): one memtable of `grams`, and
# of each other table (most see few writes; a full one is flushed, not grown)
GRAMS_MEMTABLE_SHARE = 1 / 2
TABLE_MEMTABLE_SHARE = 1 / 8
MEMTABLES_PER_TABLE = 2
METADATA_BLOCK_BYTES = 4096  # a partition of an index or a filter
# `grams`' hash memtable: a bucket (8 bytes, made with the memtable) per this many bytes
# of its size, ~2 postings a bucket when full
BYTES_PER_HASH_BUCKET = 64


class StateDirError(RuntimeError):
    """The state directory cannot be created, opened or locked."""


class StateWriteError(OSError):
    """RocksDB could not write the state (disk full, I/O error): what was committed
    before stays, and the next run continues from it."""


def _table_options(cache: Cache, memtables: WriteBufferManager, budget: MemoryBudget,
                   point_lookup: bool) -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(cache)
    # index and filter blocks in the cache, partitioned, the top level pinned: what the
    # readers of the state's files hold stays within the cache, whatever their number
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(METADATA_BLOCK_BYTES)
    table.set_pin_top_level_index_and_filter(True)
    opts.set_block_based_table_factory(table)
    opts.set_compression_type(DBCompressionType.lz4())
    opts.increase_parallelism(os.cpu_count() or 2)
    opts.set_max_background_jobs(2)
    opts.set_allow_concurrent_memtable_write(False)  # DB-wide; the hash memtable needs it
    opts.set_write_buffer_manager(memtables)  # one memory budget for every memtable
    opts.set_max_write_buffer_number(MEMTABLES_PER_TABLE)
    if point_lookup:
        opts.set_write_buffer_size(int(budget.memtables * GRAMS_MEMTABLE_SHARE))
        opts.set_prefix_extractor(SliceTransform.create_fixed_prefix(8))
        opts.set_memtable_factory(MemtableFactory.hash_link_list(
            _hash_buckets(int(budget.memtables * GRAMS_MEMTABLE_SHARE))))
        opts.set_memtable_prefix_bloom_ratio(0.1)
    else:
        opts.set_write_buffer_size(int(budget.memtables * TABLE_MEMTABLE_SHARE))
        # a Bloom filter over the memtable's whole keys: most reads of these tables look
        # for keys that are not there (a paragraph's first sight, engine.labelled)
        opts.set_memtable_whole_key_filtering(True)
        opts.set_memtable_prefix_bloom_ratio(0.1)
    return opts


def _hash_buckets(memtable_bytes: int) -> int:
    """Buckets of a hash memtable of `memtable_bytes`. Its bucket array is allocated with
    each memtable and charged to the write buffer manager. A fixed 1 << 20 buckets (8 MB)
    is more than a worker shard's whole memtable share (5.3 MB under --memory 1GiB, nine
    states): the manager is then always over its limit and switches a memtable (a new
    WAL file) on almost every write (564 switches in 400 small commits, a one-key write
    ~7 ms on average and 160 ms at the 99th percentile; 149 switches and 2.5 ms with the
    buckets in proportion)."""
    return max(1 << 10, memtable_bytes // BYTES_PER_HASH_BUCKET)


def dir_bytes(path: str) -> int:
    """Bytes of all files under a directory (SST, WAL, manifest, ...)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def _ordered(table: str) -> ReadOptions:
    """Read options for an iterator in key order ("grams"' prefix-hashed memtable
    iterates in order only when told)."""
    opts = ReadOptions()
    if table == "grams":
        opts.set_total_order_seek(True)
    return opts


class RocksMemory:
    """RocksDB's block cache and the write buffer manager that charges the memtables to
    it, sized from a budget's shares. A worker opens one state per shard it owns and
    gives them all one RocksMemory: RocksDB's way for several databases in a process
    (the cache and the manager are shared objects), so the process's figure is the
    budget's whatever the number of states, and a state that is read more gets more of
    the cache."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.cache = Cache(budget.block_cache)
        self.memtables = WriteBufferManager.new_write_buffer_manager_with_cache(
            budget.memtables, False, self.cache)


class RocksKV(KV):
    """A RocksDB database in `path`, one column family per table. `read_only` opens it
    for readers (dump, explain): no lock taken, nothing written, so a state on a
    read-only disk or copied from a backup can be read."""

    def __init__(self, path: str, read_only: bool = False,
                 tables: tuple[str, ...] | None = None,
                 budget: MemoryBudget | None = None,
                 memory: RocksMemory | None = None) -> None:
        self.path = path
        self.read_only = read_only
        self.budget = budget = budget or MemoryBudget()
        if not read_only:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise StateDirError(f"cannot create state directory {path}: "
                                    f"{exc.strerror}") from None
            if not os.access(path, os.W_OK | os.X_OK):
                raise StateDirError(f"state directory {path} is not writable")
        memory = memory or RocksMemory(budget)  # a state of its own: its own cache
        self.cache = cache = memory.cache
        self.memtables = memtables = memory.memtables
        if tables is not None and not read_only:
            raise ValueError("only a read-only state opens some of its tables")
        wanted = TABLES if tables is None else tables
        tables = TABLES
        if read_only:  # a state written before a table existed has no column family for it;
            # a reader of a few tables opens only theirs (each table's files are opened
            # with it: 0.17 s for all of a 500,000-document state, 0.007 s for two)
            try:
                tables = tuple(t for t in wanted if t in set(Rdict.list_cf(path)))
            except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception
                raise StateDirError(f"cannot open state in {path}: {exc}") from None
        families = {t: _table_options(cache, memtables, budget, t == "grams") for t in tables}
        self._options = families
        try:
            self._db = Rdict(path, _table_options(cache, memtables, budget, False),
                             column_families=families,
                             access_type=AccessType.read_only() if read_only else
                             AccessType.read_write())
        except Exception as exc:  # rocksdict raises plain Exception for IO / lock errors
            raise StateDirError(f"cannot open state in {path}: {exc}") from None
        self._cf = {t: self._db.get_column_family(t) for t in tables}
        self._handles = {t: self._db.get_column_family_handle(t) for t in tables}
        self._write_opts = WriteOptions()
        self._synced = WriteOptions()
        self._synced.sync = True
        self.written = WriteCounts()
        self._closed = False

    def get(self, table: str, key: bytes) -> bytes | None:
        cf = self._cf.get(table)  # None: a table this (read-only) state does not have
        return None if cf is None else cf.get(key)

    def get_many(self, table: str, keys: list[bytes]) -> list[bytes | None]:
        cf = self._cf.get(table)
        if cf is None or not keys:
            return [None] * len(keys)
        return cf[keys]

    def items(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        if table not in self._cf:
            return
        it = self._cf[table].iter(_ordered(table))
        it.seek(start) if start else it.seek_to_first()
        while it.valid():
            yield it.key(), it.value()
            it.next()

    def items_between(self, table: str, start: bytes, end: bytes
                      ) -> Iterator[tuple[bytes, bytes]]:
        """RocksDB stops at `end` (an upper bound), and rocksdict's own iterator yields the
        pairs: a third faster than stepping an iterator from Python (85,000 site totals).
        A generator, so that the read options live as long as the iteration: the iterator
        does not keep them, and with them gone the bound it reads is no longer `end` (it
        stopped after the first pair)."""
        if table not in self._cf:
            return
        opts = _ordered(table)
        opts.set_iterate_upper_bound(end)
        yield from self._cf[table].items(from_key=start, read_opt=opts)

    def items_back(self, table: str, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        if table not in self._cf:
            return
        it = self._cf[table].iter(_ordered(table))
        it.seek_for_prev(end)
        if it.valid() and it.key() >= end:  # seek_for_prev stops at end itself
            it.prev()
        while it.valid():
            yield it.key(), it.value()
            it.prev()

    def last_key(self, table: str) -> bytes | None:
        it = self._cf[table].iter(ReadOptions())
        it.seek_to_last()
        return it.key() if it.valid() else None

    def write(self, ops: Iterable[Op], sync: bool = False) -> None:
        batch = WriteBatch(raw_mode=True)
        handles = self._handles
        # counted as count_ops counts, inline: the commit writes an op for every known
        # gram and more, and ops come table by table, so a table's counts are looked up
        # once a run of its ops
        counts: dict[str, list[int]] = {}
        now, slot = None, [0, 0]
        for table, key, value in ops:
            if table is not now:
                now, slot = table, counts.setdefault(table, [0, 0])
            slot[0] += 1
            if value is None:
                slot[1] += len(key)
                batch.delete(key, handles[table])
            elif isinstance(value, DeleteRange):
                slot[1] += len(key) + len(value.end)
                batch.delete_range(key, value.end, handles[table])
            else:
                slot[1] += len(key) + len(value)
                batch.put(key, value, handles[table])
        try:
            self._db.write(batch, self._synced if sync else self._write_opts)
        except Exception as exc:  # rocksdict raises plain Exception for IO errors
            raise StateWriteError(f"cannot write the state in {self.path}: "
                                  f"{str(exc)[:300]}") from None
        self.written.merge(counts)

    def reclaim(self, table: str, start: bytes, end: bytes) -> None:
        """Compact the range now. Range deletions leave their data in the SST files until
        compaction reaches them, and merged-away segments are a large part of the state
        on disk; files wholly inside the range are simply dropped, so this costs little."""
        self._cf[table].compact_range(start, end)

    def disk_bytes(self) -> int:
        return dir_bytes(self.path)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._cf.clear()
            self._handles.clear()
            try:
                self._db.close()
            except Exception as exc:  # flushing the memtables failed: disk full, I/O error
                raise StateWriteError(f"cannot write the state in {self.path}: "
                                      f"{str(exc)[:300]}") from None
