"""Opening a shard: claim it, send the outboxes a crash left, replay its partitions up to
the group's committed offsets, take over from another owner (or read again what was
shown, when restarted on its own disk while catching up), and say where to read on.

Why here, beside engine.shard_step: the opening sequence is where the protocol's
exactness through crashes, lost disks and changes of owner is decided
(docs/kafka-protocol.md, "Ownership epochs", "Recovery", "Taking over"). The Kafka worker
(adapters.worker, on aiokafka) and the in-memory pipeline (loadtest/sharded.py) both
run this code, each through its own `ShardLog`, so the simulation checks the sequence
the worker runs, not a copy of it.

Pure: no Kafka, sockets, clocks, threads or files. Whatever touches those is the
ShardLog's: the state's storage, the meta topic's epochs, the partitions' records and
ends, the group's offsets, the sending, where CPU work runs and whether a rebalance is
revoking the shard.

    opened = await open_shard(shard_log, kind, index, params, shards)
    None: a rebalance cut the replay short (the state keeps what was replayed)
    else: read on from opened.state's offsets (opened.committed: the group's)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .documents import DOC_ROLE, GRAM_ROLE
from .messages import GramsMsg, PageMsg, ShownMsg, decode_doc_input
from .params import Params
from .shard_step import (
    Outbox,
    ShardState,
    replay_docs,
    replay_grams,
    resume_catch_up,
    take_over,
)
from .shards import DocShard, GramShard

# An opening is the worker's work: its lines are the worker's (the simulation's too).
log = logging.getLogger("streamdet.worker")

Chunk = list[tuple[int, bytes | None]]  # records of a partition: (offset, value)


class ShardLog(Protocol):
    """What opening a shard needs from around it. A partition is named by its input
    (`docs`, `deltas`, `grams`) and the shard's index; `kind` is `doc` or `gram`."""

    async def open(self, kind: str, index: int) -> ShardState:
        """The shard's state as this process's disk holds it, kept where a failure of
        the opening closes it."""
        ...

    async def wipe(self, state: ShardState) -> ShardState:
        """Close and delete `state` (from another owner's history), and open an empty
        one in its place."""
        ...

    async def claim(self, kind: str, index: int) -> tuple[int, int]:
        """A new ownership epoch recorded for the shard: (the newest recorded before,
        this owner's)."""
        ...

    async def committed(self, name: str, index: int) -> int:
        """The group's committed offset of a partition (0: none)."""
        ...

    def chunks(self, name: str, index: int, start: int, end: int
               ) -> AsyncGenerator[Chunk, None]:
        """A partition's records from `start` to `end`, every offset, in chunks (a
        transaction each while replaying). The caller closes it when it leaves early."""
        ...

    async def ends(self, index: int, reached: dict[str, int]) -> dict[str, int]:
        """Where the named partitions end now; `reached`: offsets they hold at least."""
        ...

    async def send(self, state: ShardState, outboxes: list[Outbox]) -> None:
        """Send outboxes, oldest first, wait for every acknowledgement and clear them."""
        ...

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`: CPU and state work (the worker's engine thread)."""
        ...

    def cut(self) -> bool:
        """Whether a rebalance is revoking the shard: the replay stops at its next chunk
        (the rebalance waits for the opening, and a member must rejoin in time)."""
        ...

    def topic(self, name: str) -> str:
        """A partition's topic, for log lines."""
        ...

    def replayed(self, name: str, index: int, records: int) -> None:
        """A chunk of a partition was replayed (metrics; the worker's failpoints)."""
        ...


@dataclass
class Opened:
    """An opened shard: its state, and the group's committed offsets of its partitions
    (a state ahead of them has rounds whose offsets the group has yet to commit)."""

    state: ShardState
    committed: dict[str, int]


async def open_shard(shard_log: ShardLog, kind: str, index: int, params: Params,
                     shards: int) -> Opened | None:
    """Claim the shard, send its left outboxes, replay it up to the group's committed
    offsets and, for a doc shard, take over or read again what was shown. None when a
    rebalance cut the replay short: the state keeps what was replayed (and whether it
    takes over), and the next opening goes on from there."""
    state = await claim(shard_log, kind, index)
    await send_left(shard_log, state, kind, index)
    replay = _open_gram if kind == GRAM_ROLE else _open_doc
    committed = await replay(shard_log, state, index, params, shards)
    return None if committed is None else Opened(state, committed)


async def claim(shard_log: ShardLog, kind: str, index: int) -> ShardState:
    """Open a shard's state as its new owner (a new epoch); a state written under an
    older epoch than the newest is from a history another owner has since replaced, and
    one that lost a segment file has lost part of its gram index: either is wiped,
    outboxes included, and rebuilt by replay."""
    state = await shard_log.open(kind, index)
    if not await shard_log.run(state.whole):
        log.warning("%s shard %d: local state has lost a segment file of its gram index: "
                    "rebuilding it", kind, index)
        state = await shard_log.wipe(state)
    newest, mine = await shard_log.claim(kind, index)
    taken_over = state.epoch != newest  # someone else (or no one) owned it last
    if taken_over and not await shard_log.run(state.is_empty):
        log.warning("%s shard %d: local state is from epoch %d, another worker has owned "
                    "the shard since (epoch %d): rebuilding it", kind, index, state.epoch,
                    newest)
        state = await shard_log.wipe(state)
    # a doc shard takes over from its last owner, or goes on with a take-over that an
    # opening cut short left in its state
    taking_over = kind == DOC_ROLE and (taken_over and newest > 0 or state.taking_over)
    await shard_log.run(state.set_epoch, mine, taking_over)
    return state


async def send_left(shard_log: ShardLog, state: ShardState, kind: str, index: int) -> None:
    """Send again the outboxes a crash left between commit and acknowledgement."""
    left = await shard_log.run(state.outboxes)
    for outbox in left:
        log.info("%s shard %d: sending %d records of outbox %s again", kind, index,
                 len(outbox.records), outbox.key.decode())
    if left:
        await shard_log.send(state, left)


async def _open_gram(shard_log: ShardLog, state: ShardState, g: int, params: Params,
                     shards: int) -> dict[str, int] | None:
    committed = await shard_log.committed("grams", g)
    start = state.offset("grams")
    log.info("gram shard %d: state at %d, group committed %d", g, start, committed)
    if start < committed:
        log.info("gram shard %d: replaying %d..%d", g, start, committed)
        role = GramShard(params, g, shards)

        async def apply(chunk: Chunk) -> None:
            msgs = [m for _, _, m in _decoded(shard_log, "grams", g, GramsMsg.decode, chunk)]
            await shard_log.run(replay_grams, state, role, msgs, chunk[-1][0] + 1)

        if not await _replay(shard_log, "grams", g, start, committed, apply):
            return None
    return {"grams": committed}


async def _open_doc(shard_log: ShardLog, state: ShardState, s: int, params: Params,
                    shards: int) -> dict[str, int] | None:
    """The docs partition replayed first, then the deltas (whose ShownMsg records a
    take-over reads), then the take-over or the catch-up's shown state read again."""
    cd = await shard_log.committed("docs", s)
    ce = await shard_log.committed("deltas", s)
    role = DocShard(params, s, shards)
    if state.offset("docs") < cd or state.offset("deltas") < ce:
        log.info("doc shard %d: replaying docs %d..%d, deltas %d..%d", s,
                 state.offset("docs"), cd, state.offset("deltas"), ce)

    async def pages(chunk: Chunk) -> None:
        got = [(o, m) for o, _, m in _decoded(shard_log, "docs", s, PageMsg.decode, chunk)]
        await shard_log.run(replay_docs, state, role, got, [], {
            "docs": chunk[-1][0] + 1, "deltas": state.offset("deltas")})

    if not await _replay(shard_log, "docs", s, state.offset("docs"), cd, pages):
        return None
    replayed_from = state.offset("deltas")
    shown: list[tuple[int, bytes]] = []  # the ShownMsg records among them

    async def deltas(chunk: Chunk) -> None:
        decoded = _decoded(shard_log, "deltas", s, decode_doc_input, chunk)
        shown.extend((o, v) for o, v, m in decoded if isinstance(m, ShownMsg))
        await shard_log.run(replay_docs, state, role, [], [m for _, _, m in decoded], {
            "docs": state.offset("docs"), "deltas": chunk[-1][0] + 1})

    if not await _replay(shard_log, "deltas", s, replayed_from, ce, deltas):
        return None
    if state.taking_over:
        # a take-over resumed on a state replayed in part reads what it did not replay
        earlier = await _records(shard_log, s, 0, replayed_from) if replayed_from else []
        await _take_over(shard_log, state, s, earlier + shown, ce, shards)
    elif state.needs_shown():
        await _resume_catch_up(shard_log, state, s)
    return {"docs": cd, "deltas": ce}


async def _take_over(shard_log: ShardLog, state: ShardState, s: int,
                     replayed: list[tuple[int, bytes]], committed: int, shards: int) -> None:
    """The last owner may have processed records after the group's commit, up to at
    most what the partitions hold now, and published events for them: until this owner
    is past those ends, events compare with what consumers were shown, read from the
    shard's ShownMsg records (`replayed` from the start, then the rest of the
    partition), and the events recorded past the commit go out again
    (engine.shard_step.take_over)."""
    ends = await shard_log.ends(s, {"docs": state.offset("docs"),
                                    "deltas": state.offset("deltas")})
    records = replayed + await _records(shard_log, s, state.offset("deltas"), ends["deltas"])
    outbox = await shard_log.run(take_over, state, records, committed,
                                 {"docs": ends["docs"], "deltas": ends["deltas"]}, s, shards)
    if state.catching_up() is not None:
        log.info("doc shard %d: taken over; %d URLs shown, %d events recorded after the "
                 "group's commit sent again; comparing with what was shown up to docs "
                 "%d, deltas %d", s, len(state.shown),
                 len(outbox.events()) if outbox else 0, ends["docs"], ends["deltas"])
    else:
        log.info("doc shard %d: taken over; nothing past the group's commit", s)
    if outbox is not None:
        await shard_log.send(state, [outbox])


async def _resume_catch_up(shard_log: ShardLog, state: ShardState, s: int) -> None:
    """Restarted on this disk while catching up: what consumers were shown, read again
    from the whole deltas partition (engine.shard_step.resume_catch_up)."""
    end = (await shard_log.ends(s, {"deltas": 0}))["deltas"]
    records = await _records(shard_log, s, 0, end)
    await shard_log.run(resume_catch_up, state, records)
    log.info("doc shard %d: restarted while catching up; %d URLs shown, comparing with "
             "them up to %s", s, len(state.shown), state.catch_up)


async def _replay(shard_log: ShardLog, name: str, index: int, start: int, end: int,
                  apply: Callable[[Chunk], Any]) -> bool:
    """Apply a partition's records from `start` to `end` chunk by chunk; False when a
    rebalance cut it short (the partition's reader closed on leaving)."""
    async with contextlib.aclosing(shard_log.chunks(name, index, start, end)) as chunks:
        async for chunk in chunks:
            if shard_log.cut():
                return False
            await apply(chunk)
            shard_log.replayed(name, index, len(chunk))
    return True


async def _records(shard_log: ShardLog, s: int, start: int, end: int
                   ) -> list[tuple[int, bytes]]:
    """(offset, value) of doc shard s's deltas partition from `start` to `end`."""
    out = []
    async with contextlib.aclosing(shard_log.chunks("deltas", s, start, end)) as chunks:
        async for chunk in chunks:
            out.extend((o, v) for o, v in chunk if v is not None)
    return out


def _decoded(shard_log: ShardLog, name: str, index: int, decode: Callable[[bytes], Any],
             chunk: Chunk) -> list[tuple[int, bytes, Any]]:
    """(offset, value, message) for the records `decode` reads; the others are logged
    and skipped (not ours: another producer wrote here)."""
    out = []
    for offset, value in chunk:
        try:
            out.append((offset, value, decode(value)))
        except Exception as exc:  # noqa: BLE001 - whatever the bytes make it raise
            log.error("skipping record %s[%d]@%d: %s", shard_log.topic(name), index,
                      offset, exc)
    return out
