"""The tasks of a running alerter - the reader, the delivery task and the window ticker -
and their wind-down in order.

Stopping (the stop event set): the open windows close at once, queued alerts get
`--drain` seconds to go out, a request in flight always completes, and whatever remains
is read and alerted again on the next start."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .alerter import Alerter

log = logging.getLogger("streamdet.alerts")

TICK_S = 0.05  # window deadlines are checked this often

OnStart = Callable[[Alerter], None] | None


async def drive(alerter: Alerter, reader: Callable[[], Awaitable[None]],
                stop: asyncio.Event) -> None:
    """Run the reader, the delivery task and the window ticker; wind down in order."""
    deliver = asyncio.create_task(alerter.deliver(), name="streamdet-alerts-deliver")
    read = asyncio.create_task(reader(), name="streamdet-alerts-read")
    tick = asyncio.create_task(_ticker(alerter), name="streamdet-alerts-tick")
    try:
        # The reader returns at the end of input, when idle, or when stop is set.
        done, _ = await asyncio.wait({read, deliver}, return_when=asyncio.FIRST_COMPLETED)
        if deliver in done:
            deliver.result()  # delivery task died: raise its error
        read.result()
        await _wind_down(alerter, deliver, stop)
    finally:
        for t in (read, deliver, tick):
            if not t.done():
                alerter.abort.set()
                t.cancel()
        await asyncio.gather(read, deliver, tick, return_exceptions=True)
        try:
            await alerter.commit(force=True)
        finally:
            await alerter.close()


async def _ticker(alerter: Alerter) -> None:
    while True:
        alerter.tick()
        await alerter.commit()
        await asyncio.sleep(TICK_S)


async def _wind_down(alerter: Alerter, deliver: asyncio.Task, stop: asyncio.Event) -> None:
    """Every window closes now; the queue is delivered, or given `--drain` seconds once
    stop is set."""
    alerter.flush()
    alerter.closing = True
    alerter.work.set()
    stopping = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({deliver, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if deliver not in done:
        log.info("stopping: %d alerts queued get %g s to go out", len(alerter.queue),
                 alerter.cfg.drain)
        done, _ = await asyncio.wait({deliver}, timeout=alerter.cfg.drain)
        if not done:
            alerter.abort.set()  # a request in flight still completes
    await deliver
