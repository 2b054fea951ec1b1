"""`streamdet` command line (SPEC §4). Errors a user can fix are one line, no traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .adapters.inputs import InputError, open_source, sample_source
from .adapters.outputs import JsonlSink
from .engine.params import FOREIGN_MODES, Params, ParamsError
from .engine.records import DEFAULT_MAX_BODY

DEFAULT_STATE = "streamdet-state"


class UsageError(RuntimeError):
    """A problem the user can fix: printed as one line, exit status 2."""


def add_params(p: argparse.ArgumentParser) -> None:
    d = Params()
    p.add_argument("-k", type=int, default=d.k, help=f"gram length in tokens (default {d.k})")
    p.add_argument("-m", type=int, default=d.m, help=f"postings cap: grams on more documents "
                   f"are common, not patches (default {d.m})")
    p.add_argument("-c", type=int, default=d.c, help=f"minimum number of sources (default {d.c})")
    p.add_argument("--theta", type=float, default=d.theta,
                   help=f"minimum patch fraction (default {d.theta})")
    p.add_argument("--foreign", choices=FOREIGN_MODES, default=d.foreign,
                   help="what counts as another server (default domain)")


def params_of(args: argparse.Namespace) -> Params:
    return Params(k=args.k, m=args.m, c=args.c, theta=args.theta, foreign=args.foreign)


def open_store(path: str, must_exist: bool = False):
    from .state.rocks import RocksKV
    from .state.txn import Store

    if must_exist and not os.path.exists(os.path.join(path, "CURRENT")):
        raise UsageError(f"no streamdet state in {path}")
    return Store(RocksKV(path))


class Progress:
    """A one-line progress display on a terminal; silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0

    def __call__(self, s) -> None:
        now = time.monotonic()
        if not self.enabled or now - self._last < 0.5:
            return
        self._last = now
        rate = s.pages / s.seconds if s.seconds else 0.0
        sys.stderr.write(f"\r{s.pages:,} pages  {rate:,.0f} pages/s  "
                         f"{s.events['quilt']:,} quilts  {s.dead_total:,} dead letters ")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled and self._last:
            sys.stderr.write("\r\033[K")


def cmd_run(args: argparse.Namespace) -> int:
    from .adapters.embedded import EmbeddedRunner

    params = params_of(args)
    sources = [open_source(p) for p in args.input] if args.input else [sample_source()]
    store = open_store(args.state)
    dead_path = args.dead_letter or os.path.join(args.state, "dead-letter.jsonl")
    events = JsonlSink(args.events)
    dead = JsonlSink(dead_path)
    progress = Progress(sys.stderr.isatty())
    try:
        runner = EmbeddedRunner(store, params, events, dead, batch_size=args.batch,
                                max_body=args.max_body, on_batch=progress)
        s = runner.run(sources)
        disk = store.kv.disk_bytes()
    finally:
        progress.done()
        events.close()
        dead.close()
        store.close()
    rate = s.pages / s.seconds if s.seconds else 0.0
    ev = ", ".join(f"{n} {k}" for k, n in sorted(s.events.items())) or "no events"
    dl = (f"{s.dead_total} dead letters ({', '.join(f'{n} {k}' for k, n in s.dead.most_common())})"
          f" -> {dead_path}") if s.dead_total else "0 dead letters"
    skipped = f", {s.skipped} already applied" if s.skipped else ""
    print(f"streamdet: {s.pages} pages in {s.seconds:.1f} s ({rate:.0f} pages/s){skipped}; "
          f"{ev}; {dl}; state {disk / 1e6:.1f} MB in {args.state}", file=sys.stderr)
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    from .adapters.report import dump_rows

    store = open_store(args.state, must_exist=True)
    try:
        out = sys.stdout
        for row in dump_rows(store):
            out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    finally:
        store.close()
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from .adapters.report import explain

    store = open_store(args.state, must_exist=True)
    try:
        print(explain(store, args.url))
    finally:
        store.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamdet", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="detect quilts in files or stdin, in one process")
    run.add_argument("--input", action="append", metavar="PATH",
                     help="JSONL, JSONL.gz, WARC or WARC.gz file, or - for stdin (repeatable); "
                     "default: the bundled sample crawl")
    run.add_argument("--state", default=DEFAULT_STATE, metavar="DIR",
                     help=f"RocksDB state directory (default ./{DEFAULT_STATE})")
    run.add_argument("--events", default="-", metavar="PATH",
                     help="events JSONL (default - : stdout)")
    run.add_argument("--dead-letter", metavar="PATH",
                     help="dead-letter JSONL (default DIR/dead-letter.jsonl)")
    run.add_argument("--batch", type=int, default=128, help="records per atomic batch")
    run.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY,
                     help="largest html/text body accepted, in bytes (default 10 MB)")
    add_params(run)
    run.set_defaults(func=cmd_run)

    dump = sub.add_parser("dump", help="print every document's result as JSONL, sorted by URL")
    dump.add_argument("--state", default=DEFAULT_STATE, metavar="DIR")
    dump.set_defaults(func=cmd_dump)

    exp = sub.add_parser("explain", help="say why a page is (not) quilted")
    exp.add_argument("url")
    exp.add_argument("--state", default=DEFAULT_STATE, metavar="DIR")
    exp.set_defaults(func=cmd_explain)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .state.rocks import StateDirError
    from .state.txn import StateError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, InputError, ParamsError, StateDirError, StateError) as exc:
        print(f"streamdet: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("streamdet: interrupted; the state is consistent up to the last batch",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
