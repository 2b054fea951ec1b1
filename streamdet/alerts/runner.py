"""`run_alerts`: the alerter on its source (an events file or the events topic), with its
position file open for the whole run."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from .config import AlertsConfig
from .file_source import run_file
from .kafka_source import run_kafka
from .lifecycle import OnStart
from .position import Position
from .stats import Stats
from .timing import Clock, LoopClock


async def run_alerts(cfg: AlertsConfig, stop: asyncio.Event | None = None,
                     on_start: OnStart = None, clock: Clock | None = None) -> Stats:
    """Run until the input ends (a file without follow), `idle`, or `stop` is set.
    `clock` drives windows, the rate limit and retry delays (default: the loop's)."""
    cfg.check()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(1, thread_name_prefix="streamdet-alerts-state")
    try:
        state = await loop.run_in_executor(pool, Position, cfg.state_path(), cfg.source_id())
    except BaseException:
        pool.shutdown()
        raise
    try:
        source = run_file if cfg.events is not None else run_kafka
        return await source(cfg, state, pool, stop, on_start, clock or LoopClock())
    finally:
        await loop.run_in_executor(pool, state.close)
        pool.shutdown()
