"""`streamdet alerts`: its options and the command (`--replay FILE` included).

Errors a user can fix are AlertsError (a UsageError): `streamdet.cli.main` prints them as
one line with exit status 2, like every other command's."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sqlite3
import sys
from typing import TYPE_CHECKING

from ..console import env, log_to_stderr
from .config import AlertsConfig

if TYPE_CHECKING:  # the service's modules load when the command runs, not with the parser
    from .alerter import Alerter
    from .stats import Stats


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def _input_options(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("input (one of --events or --broker)")
    src.add_argument("--events", metavar="FILE", help="events JSONL file (streamdet run --events)")
    src.add_argument("--follow", action="store_true",
                     help="keep reading the events file as it grows (default: stop at its end)")
    src.add_argument("--broker", metavar="HOST:PORT",
                     help="Kafka bootstrap server (default: STREAMDET_BROKER, unless --events)")
    src.add_argument("--prefix", default=env("PREFIX", "streamdet"),
                     help="topic name prefix: reads PREFIX-events (default streamdet)")
    src.add_argument("--group", default=env("ALERTS_GROUP"),
                     help="consumer group of the alerter (default PREFIX-alerts)")
    src.add_argument("--start", choices=("earliest", "latest"), default="earliest",
                     help="where a new group starts reading (default earliest: nothing missed)")
    src.add_argument("--state-file", metavar="PATH", default=env("ALERTS_STATE"),
                     help="SQLite state: alerted seqs (and the file position); default "
                     "FILE.alerts-position, or GROUP.alerts-position in Kafka mode")
    src.add_argument("--idle", type=float, metavar="S",
                     help="stop once nothing new arrived for S seconds and all is delivered")
    src.add_argument("--include-rescore", action="store_true",
                     help="alert rescore events too (default: quilt events only)")
    src.add_argument("--min-score", type=float, metavar="X",
                     default=env("ALERTS_MIN_SCORE"),  # a string: argparse converts it
                     help="alert only events whose spam_score reaches X, in [0, 1] (an "
                     "event without one reaches none; default: every quilt)")
    src.add_argument("--max-pending", type=int, default=50000, metavar="N",
                     help="events read ahead of the committed position before reading pauses "
                     "(default 50000)")


def _grouping_options(p: argparse.ArgumentParser) -> None:
    grp = p.add_argument_group("grouping and rate")
    grp.add_argument("--window", type=float, default=30.0, metavar="S",
                     help="seconds a domain's window stays open (default 30)")
    grp.add_argument("--max-pages", type=int, default=100, metavar="N",
                     help="pages per alert at most (default 100)")
    grp.add_argument("--max-per-minute", type=float, default=20.0, metavar="N",
                     help="alerts per minute at most (default 20; 0: no limit)")
    grp.add_argument("--burst", type=int, default=5, metavar="N",
                     help="alerts that may go at once before the rate applies (default 5)")


def _delivery_options(p: argparse.ArgumentParser) -> None:
    out = p.add_argument_group("delivery")
    out.add_argument("--webhook", metavar="URL", default=env("ALERTS_WEBHOOK"),
                     help="where alerts are POSTed (default: STREAMDET_ALERTS_WEBHOOK)")
    out.add_argument("--slack", action="store_true",
                     help="send a Slack-compatible body (text and blocks)")
    out.add_argument("--header", action="append", type=_header, default=[], metavar="'N: V'",
                     help="extra request header, e.g. 'Authorization: Bearer ...' (repeatable)")
    out.add_argument("--timeout", type=float, default=10.0, metavar="S",
                     help="seconds per request (default 10)")
    out.add_argument("--attempts", type=int, default=8, metavar="N",
                     help="attempts before an alert is dead-lettered (default 8; 0: forever)")
    out.add_argument("--backoff", type=float, default=1.0, metavar="S",
                     help="first retry delay, doubled each time, with jitter (default 1)")
    out.add_argument("--max-backoff", type=float, default=60.0, metavar="S",
                     help="longest retry delay (default 60)")
    out.add_argument("--dead-letter", metavar="PATH",
                     help="JSONL of alerts that could not be delivered "
                     "(default FILE.alerts-dead-letter.jsonl, or GROUP.alerts-dead-letter"
                     ".jsonl in Kafka mode)")
    out.add_argument("--drain", type=float, default=10.0, metavar="S",
                     help="on SIGTERM/SIGINT, seconds left to send queued alerts (default 10)")
    out.add_argument("--replay", metavar="PATH",
                     help="send the alerts of a dead-letter file again (with the delivery "
                     "options above), then stop: those delivered leave the file, the others "
                     "stay in it; no --events or --broker needed")


def add_parser(sub) -> argparse.ArgumentParser:
    """Add `streamdet alerts` to the subparsers of the streamdet command line."""
    p = sub.add_parser(
        "alerts", help="POST new quilts, grouped per domain, to a webhook (spam-team alerts)",
        description="Consume quilt events (the events topic or an events file) and POST each "
        "new quilt to a webhook, grouped per registered domain within a window, rate-limited, "
        "retried with backoff; the position is committed only after delivery.")
    _input_options(p)
    _grouping_options(p)
    _delivery_options(p)
    p.set_defaults(func=cmd_alerts)
    return p


def config_of(args: argparse.Namespace) -> AlertsConfig:
    broker = args.broker
    if broker is None and args.events is None:
        broker = env("BROKER") or None
    return AlertsConfig(
        webhook=args.webhook or "", events=args.events, broker=broker, prefix=args.prefix,
        group=args.group, start=args.start, state_file=args.state_file, follow=args.follow,
        idle=args.idle, include_rescore=args.include_rescore, min_score=args.min_score,
        window=args.window,
        max_pages=args.max_pages, max_per_minute=args.max_per_minute, burst=args.burst,
        slack=args.slack, headers=dict(args.header), timeout=args.timeout,
        attempts=args.attempts, backoff=args.backoff, max_backoff=args.max_backoff,
        dead_letter=args.dead_letter, max_pending=args.max_pending, drain=args.drain)


def _on_signals(handler) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, handler)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass


def cmd_replay(cfg: AlertsConfig, path: str) -> int:
    from .dead_letters import replay

    async def main() -> tuple[int, int]:
        stop = asyncio.Event()
        _on_signals(stop.set)
        cfg.check_delivery()
        return await replay(cfg, path, stop)

    delivered, left = asyncio.run(main())
    print(f"streamdet: alerts: {delivered} dead-lettered alerts delivered, {left} left in "
          f"{path}", file=sys.stderr)
    return 0 if left == 0 else 1


async def _alerts(cfg: AlertsConfig) -> Stats:
    """run_alerts with SIGTERM/SIGINT stopping it; a second signal stops delivering now."""
    from .runner import run_alerts

    stop = asyncio.Event()
    started: list[Alerter] = []

    def on_signal() -> None:
        if stop.is_set() and started:
            started[0].abort.set()
        stop.set()

    _on_signals(on_signal)
    return await run_alerts(cfg, stop, on_start=started.append)


def cmd_alerts(args: argparse.Namespace) -> int:
    cfg = config_of(args)
    log_to_stderr()
    if args.replay:
        return cmd_replay(cfg, args.replay)
    try:
        stats = asyncio.run(_alerts(cfg))
    except sqlite3.Error as exc:  # the position file: disk full, I/O error
        print(f"streamdet: error: state file {cfg.state_path()}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not type(exc).__module__.startswith("aiokafka"):
            raise
        print(f"streamdet: error: Kafka: {exc}", file=sys.stderr)
        return 1
    print(stats.summary(cfg.dead_letter_path()), file=sys.stderr, flush=True)
    return 0
