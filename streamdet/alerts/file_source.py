"""Alerts from an events JSONL file (`streamdet run --events FILE`).

Without `--follow` the file is read to its end and the command exits once every alert is
delivered; with it the file is tailed (waiting for it to appear; a rotated file is not
followed). The position is a byte offset at a line start: a file that shrank below it, or
whose offset is not at a line start, is refused (rotated or replaced)."""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from .alerter import Alerter
from .config import AlertsConfig, AlertsError
from .lifecycle import OnStart, drive
from .position import Position
from .stats import Stats
from .timing import Clock, sleep_unless

log = logging.getLogger("streamdet.alerts")

READ_CHUNK = 1 << 20  # bytes read from an events file at a time
POLL_S = 0.2  # how often a followed file is looked at


async def _open(cfg: AlertsConfig, stop: asyncio.Event) -> BinaryIO | None:
    """The events file; with --follow, once it exists (None if stopped first)."""
    waited = False
    while True:
        try:
            return open(cfg.events, "rb")  # noqa: SIM115 - closed by the caller
        except FileNotFoundError:
            if not cfg.follow:
                raise AlertsError(f"no events file {cfg.events}") from None
            if not waited:  # following: the writer may not have started yet
                log.info("waiting for events file %s to exist", cfg.events)
                waited = True
            if await sleep_unless(stop, POLL_S):
                return None
        except OSError as exc:
            raise AlertsError(f"cannot read events file {cfg.events}: "
                              f"{exc.strerror or exc}") from None


def _check_position(f: BinaryIO, path: str, state: Position) -> None:
    start = state.position
    size = os.fstat(f.fileno()).st_size
    if start > size:
        raise AlertsError(f"events file {path} ({size} bytes) is shorter than the position "
                          f"{start} kept in {state.path}: truncated or replaced? Use a new "
                          "--state-file")
    if start > 0 and os.pread(f.fileno(), 1, start - 1) != b"\n":
        raise AlertsError(f"the position {start} kept in {state.path} is not at a line "
                          f"start of {path}: replaced? Use a new --state-file")


async def run_file(cfg: AlertsConfig, state: Position, pool: ThreadPoolExecutor,
                   stop: asyncio.Event, on_start: OnStart, clock: Clock) -> Stats:
    f = await _open(cfg, stop)
    if f is None:
        return Stats()
    loop = asyncio.get_running_loop()
    try:
        _check_position(f, cfg.events, state)
        start = state.position
        f.seek(start)

        async def commit(ready: dict, alerted: list) -> None:
            pos = ready.get(None)
            if pos is not None and pos == state.position:
                pos = None
            if pos is None and not alerted:
                return
            await loop.run_in_executor(pool, state.save, pos, alerted)
            alerter.stats.position = state.position

        alerter = Alerter(cfg, state.alerted, commit, clock)
        alerter.stats.position = start
        if on_start:
            on_start(alerter)
        if start:
            log.info("events file %s: resuming at byte %d", cfg.events, start)
        await drive(alerter, lambda: _read(cfg, f, start, alerter, stop), stop)
        return alerter.stats
    finally:
        f.close()


async def _read(cfg: AlertsConfig, f: BinaryIO, start: int, alerter: Alerter,
                stop: asyncio.Event) -> None:
    """Offer each complete line; a partial last line is the writer's, not ours yet."""
    loop = asyncio.get_running_loop()
    pos, buf, i, n = start, b"", 0, 0
    last = loop.time()
    while not stop.is_set():
        nl = buf.find(b"\n", i)
        if nl < 0:
            buf, i = buf[i:], 0
            chunk = f.read(READ_CHUNK)
            if chunk:
                buf += chunk
                last = loop.time()
                continue
            if not cfg.follow:
                return
            if cfg.idle is not None and loop.time() - last >= cfg.idle:
                return
            if os.stat(cfg.events).st_size < pos:
                raise AlertsError(f"events file {cfg.events} shrank below byte {pos} "
                                  "while followed (truncated?)")
            await sleep_unless(stop, POLL_S)
            continue
        if not alerter.has_room():  # deliveries are behind: wait, keep the rest
            await sleep_unless(stop, POLL_S)
            continue
        line, i = buf[i:nl], nl + 1
        pos += len(line) + 1
        if line.strip():
            alerter.offer(line, None, pos)
        else:
            alerter.skip(None, pos)
        n += 1
        if n % 1000 == 0:
            await asyncio.sleep(0)
