"""`streamdet` command line (SPEC §4). Errors a user can fix are one line, no traceback.

This module holds each command's arguments and what the command runs: reading a state is
the read side's (streamdet.reading), running the pipeline the adapters'.

A command imports the engine's roles, the read side's views, the runners and the Kafka
clients when it runs, not at the top: together they take a few hundred milliseconds to
import (the engine's compiled kernels, selectolax, multiprocessing, aiokafka,
prometheus_client), which `streamdet --help` and a usage error need not pay."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time

from .adapters.allocator import tune_allocator
from .adapters.analyzers import default_processes
from .adapters.collector import tune_collector
from .adapters.inputs import (
    BATCH_WAIT_S,
    DEFAULT_BATCH,
    InputError,
    open_source,
    sample_source,
)
from .adapters.outputs import JsonlSink, SinkError, json_line
from .adapters.watchdog import DEFAULT_PAGE_TIMEOUT
from .console import PlainStdout, UsageError, env, env_as, int_env, log_to_stderr
from .engine.params import FOREIGN_MODES, Params, ParamsError
from .engine.records import DEFAULT_MAX_BODY, Page
from .reading.states import DEFAULT_STATE, all_shard_dirs, open_store
from .state.budget import MemoryBudget
from .state.rocks import StateDirError
from .state.txn import StateError


def add_params(p: argparse.ArgumentParser, env_prefix: bool = False) -> None:
    """-k -m -c --theta --foreign --phi --gamma --popular --monster-* --chunk-threshold
    --stop-chunks; with env_prefix, defaults from STREAMDET_K, _M, _C, _THETA, _FOREIGN,
    _PHI, _GAMMA, _POPULAR, _MONSTER_PAGES, _MONSTER_POP, _MONSTER_SD, _CHUNK_THRESHOLD,
    _STOP_CHUNKS (the worker's configuration in a container)."""
    d = Params()
    k, m, c, theta, foreign, phi, gamma = d.k, d.m, d.c, d.theta, d.foreign, d.phi, d.gamma
    popular, monster = d.popular, (d.monster_pages, d.monster_pop, d.monster_sd)
    threshold, stop = d.chunk_threshold, None
    if env_prefix:
        k, m, c = int_env("K", k), int_env("M", m), int_env("C", c)
        theta, foreign = env_as("THETA", float, theta), env("FOREIGN", foreign)
        phi, gamma = env_as("PHI", float, phi), int_env("GAMMA", gamma)
        popular = int_env("POPULAR", popular)
        monster = (int_env("MONSTER_PAGES", monster[0]), env_as("MONSTER_POP", float, monster[1]),
                   env_as("MONSTER_SD", float, monster[2]))
        threshold, stop = int_env("CHUNK_THRESHOLD", threshold), env("STOP_CHUNKS", None)
    p.add_argument("-k", type=int, default=k, help=f"gram length in tokens (default {k})")
    p.add_argument("-m", type=int, default=m, help=f"postings cap: grams on more documents "
                   f"are common, not patches (default {m})")
    p.add_argument("-c", type=int, default=c, help=f"minimum number of sources (default {c})")
    p.add_argument("--theta", type=float, default=theta,
                   help=f"minimum patch fraction (default {theta})")
    p.add_argument("--foreign", choices=FOREIGN_MODES, default=foreign,
                   help=f"what counts as another server (default {foreign})")
    p.add_argument("--phi", type=float, default=phi,
                   help="share of the patch grams a source must newly cover to count "
                   f"toward -c (default {phi}: every source counts)")
    p.add_argument("--gamma", type=int, default=gamma,
                   help="fewest consecutive equal sentences that make two pages on "
                   f"different servers partial duplicates (default {gamma})")
    p.add_argument("--popular", type=int, default=popular, metavar="P",
                   help="fewest live documents that make a gram a popular phrase, counted "
                   f"per page as pop(d) (default {popular})")
    p.add_argument("--monster-pages", type=int, default=monster[0], metavar="N",
                   help=f"a site is a monster candidate from this many pages (default "
                   f"{monster[0]}) ...")
    p.add_argument("--monster-pop", type=float, default=monster[1], metavar="X",
                   help=f"... when the mean of its pages' pop(d) is at least this (default "
                   f"{monster[1]:g}) ...")
    p.add_argument("--monster-sd", type=float, default=monster[2], metavar="S",
                   help=f"... and their population sd below this (default {monster[2]:g})")
    p.add_argument("--chunk-threshold", type=int, default=threshold, metavar="T",
                   help="fewest live pages that put a paragraph in the labelled set "
                   f"(blind discovery; 0: only labelled paragraphs; default {threshold})")
    p.add_argument("--stop-chunks", default=stop, metavar="FILE",
                   help="a file of stop chunks, one paragraph a line: never labelled, not "
                   "counted in contains(L, f) (lines of fewer than 3 words always are)")


def port_number(text: str) -> int:
    """A TCP port for a server: 0 (any free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 (any free one) to 65535, not {port}")
    return port


def params_of(args: argparse.Namespace) -> Params:
    return Params(k=args.k, m=args.m, c=args.c, theta=args.theta, foreign=args.foreign,
                  phi=args.phi, gamma=args.gamma, popular=args.popular,
                  monster_pages=args.monster_pages, monster_pop=args.monster_pop,
                  monster_sd=args.monster_sd, chunk_threshold=args.chunk_threshold,
                  stop_chunks=_stop_chunks(args.stop_chunks))


def _stop_chunks(path: str | None) -> tuple[int, ...]:
    """The keys of a stop-chunk file's lines (SPEC §8), () without one."""
    from .engine.chunks import text_keys

    if not path:
        return ()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the stop chunks in {path}: {exc}") from None
    return tuple(text_keys(text).tolist())


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
        pct = (f"{min(100.0, 100.0 * s.bytes_read / s.bytes_total):5.1f}%  "
               if s.bytes_total else "")
        sys.stderr.write(f"\r\033[K{pct}{s.pages:,} pages  {rate:,.0f} pages/s  "
                         f"{s.events['quilt']:,} quilts  {s.dead_total:,} dead letters ")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled and self._last:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _warn_fresh_state(store, events: str | None) -> None:
    """A new state writing to an events file that already holds events: the file is
    appended to (a restarted run goes on where its state stopped), but a new state's
    URLs start their seqs again, so the file will hold a URL's seq twice."""
    if events is None or events == "-" or store.positions():
        return
    try:
        held = os.path.getsize(events) > 0
    except OSError:
        return
    if held:
        print(f"streamdet: warning: {events} already holds events and this state is new: "
              "they are appended to, and seqs start again; give a new --events file to "
              "keep one state's events apart", file=sys.stderr)


def _same_file(a: str, b: str) -> bool:
    return a not in ("-", None) and b not in ("-", None) and (
        os.path.realpath(a) == os.path.realpath(b))


def run_metrics(port: int | None):
    """Serve /metrics for `run` when asked (--metrics-port); the metrics, or None."""
    if port is None:
        return None
    from .adapters.metrics import metrics, serve

    real = serve(port)
    print(f"streamdet: metrics on http://127.0.0.1:{real}/metrics", file=sys.stderr, flush=True)
    return metrics()


def analysis_processes(args: argparse.Namespace) -> int:
    """--analyzers (STREAMDET_ANALYZERS), or the default count; below 0 is a usage error."""
    if args.analyzers is not None and args.analyzers < 0:
        raise UsageError(f"--analyzers must be 0 or more, got {args.analyzers}")
    return default_processes() if args.analyzers is None else args.analyzers


def memory_budget(args: argparse.Namespace, analyzers: int):
    """--memory (STREAMDET_MEMORY) as the MemoryBudget the engine's process shares out,
    once `analyzers` analysis processes are charged; a bad figure is a usage error."""
    try:
        return MemoryBudget.parse(args.memory).for_analysis(analyzers)
    except ValueError as exc:
        raise UsageError(f"--memory: {exc}") from None


def check_page_timeout(args: argparse.Namespace) -> None:
    if not args.page_timeout > 0:
        raise UsageError(f"--page-timeout must be a positive number of seconds, got "
                         f"{args.page_timeout}")


def add_analysis_options(p: argparse.ArgumentParser) -> None:
    """--analyzers, --memory and --page-timeout (run and worker)."""
    p.add_argument("--analyzers", type=int, default=int_env("ANALYZERS"), metavar="N",
                   help="processes that parse pages beside the engine, under a watchdog "
                   "(default 1; 0: parse in this process, with no watchdog)")
    p.add_argument("--memory", default=env("MEMORY", "1GiB"), metavar="SIZE",
                   help="memory for caches, memtables, batches in flight and the analysis "
                   "processes (64 MiB each), e.g. 512MiB or 4GiB (default 1GiB; "
                   "interpreters come on top, ~100 MB a process)")
    p.add_argument("--page-timeout", type=float, default=float(
        env("PAGE_TIMEOUT") or DEFAULT_PAGE_TIMEOUT), metavar="S",
        help="a page still being analysed after S seconds is dead-lettered too_slow "
        f"(default {DEFAULT_PAGE_TIMEOUT:g})")


def cmd_run(args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}")
    analyzers = analysis_processes(args)
    if args.max_body < 1:
        raise UsageError(f"--max-body must be at least 1 byte, got {args.max_body}")
    check_page_timeout(args)
    budget = memory_budget(args, analyzers)
    params = params_of(args)
    sources = [open_source(p) for p in args.input] if args.input else [sample_source()]
    seen: dict[str, str] = {}
    for src in sources:
        if src.key in seen:
            raise UsageError(f"input given twice: {src.label}"
                             + (f" (same file as {seen[src.key]})" if seen[src.key] != src.label
                                else ""))
        seen[src.key] = src.label
    dead_path = args.dead_letter or os.path.join(args.state, "dead-letter.jsonl")
    for what, out in (("--events", args.events), ("--dead-letter", dead_path)):
        for src in sources:
            if src.key not in ("stdin", "sample") and _same_file(out, src.key):
                raise UsageError(f"{what} {out} is also an input")
    if _same_file(args.events, dead_path):
        raise UsageError(f"--events and --dead-letter are the same file: {dead_path}")
    from .adapters.embedded import EmbeddedRunner

    if any(src.key == "stdin" for src in sources) and sys.stdin.isatty():
        print("streamdet: reading JSONL records from the terminal; end with Ctrl-D",
              file=sys.stderr)
    store = open_store(args.state, budget=budget)
    progress = Progress(sys.stderr.isatty())
    try:
        _warn_fresh_state(store, args.events)
        try:
            events = JsonlSink(args.events, "events")
        except SinkError as exc:
            raise UsageError(str(exc)) from None
        try:
            try:
                dead = JsonlSink(dead_path, "dead-letter")
            except SinkError as exc:
                raise UsageError(str(exc)) from None
            try:
                runner = EmbeddedRunner(store, params, events, dead, batch_size=args.batch,
                                        max_body=args.max_body, on_batch=progress,
                                        analyzers=analyzers,
                                        page_timeout=args.page_timeout, budget=budget,
                                        sensor=run_metrics(args.metrics_port))
                s = runner.run(sources)
            finally:
                progress.done()
                dead.close()
        finally:
            events.close()
        disk = store.kv.disk_bytes()
    finally:
        store.close()
    if s.implausible_times:
        s.notes.append(f"{s.implausible_times} records had a fetched_at that is not finite, "
                       "before 1990 or more than a day ahead: read as absent")
    if s.replaced:
        s.notes.append(f"{s.replaced} analysis processes were replaced (a page past "
                       "--page-timeout, or a crash): see the dead letters")
    for note in s.notes:
        print(f"streamdet: note: {note}", file=sys.stderr)
    rate = s.pages / s.seconds if s.seconds else 0.0
    ev = ", ".join(f"{n} {k}" for k, n in sorted(s.events.items())) or "no events"
    dl = (f"{s.dead_total} dead letters ({', '.join(f'{n} {k}' for k, n in s.dead.most_common())})"
          f" -> {dead_path}") if s.dead_total else "0 dead letters"
    skipped = f", {s.skipped} already applied" if s.skipped else ""
    ignored = sum(s.ignored.values())
    ign = (f"; {ignored} WARC responses ignored as not pages "
           f"({', '.join(f'{n} {k}' for k, n in s.ignored.most_common(3))})") if ignored else ""
    print(f"streamdet: {s.pages} pages in {s.seconds:.1f} s ({rate:.0f} pages/s){skipped}; "
          f"{ev}; {dl}{ign}; state {disk / 1e6:.1f} MB in {args.state}", file=sys.stderr)
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    from .reading.shards import state_rows

    rows = state_rows(args.state, partial=args.partial, partials=args.partials,
                      clusters=args.clusters)
    out = sys.stdout.buffer
    for row in rows:
        out.write(json_line(row))
    out.flush()
    return 0


def _warn(message: str) -> None:
    print(f"streamdet: warning: {message}", file=sys.stderr)


def cmd_similar(args: argparse.Namespace) -> int:
    from .reading.similar import QUERY_URL, kept_page, similar_in, similar_text

    def query(*stores) -> Page:
        """The page asked about: a URL's kept text (from whichever of `stores`, one state
        or doc shards, holds it), or the given file's."""
        if args.url is not None:
            return kept_page(args.url, stores)
        path = args.text if args.text is not None else args.html
        try:
            if path == "-":
                body = sys.stdin.buffer.read().decode("utf-8", errors="replace")
            else:
                with open(path, encoding="utf-8", errors="replace") as f:
                    body = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
        url = args.as_url or QUERY_URL
        return Page(url, text=body) if args.text is not None else Page(url, html=body)

    answer, params = similar_in(args.state, query)
    if args.json:
        sys.stdout.buffer.write(json_line(answer))
    else:
        print(similar_text(answer, params))
    sys.stdout.flush()
    return 0


def cmd_phrases(args: argparse.Namespace) -> int:
    """SPEC §8: the grams on the most live documents."""
    from .reading.shards import state_phrases

    if args.top < 1:
        raise UsageError(f"--top must be >= 1, got {args.top}")
    rows = state_phrases(args.state, args.top, _warn)
    out = sys.stdout.buffer
    for row in rows:
        out.write(json_line(row) if args.json else f"{row['docs']}\t{row['phrase']}\n".encode())
    out.flush()
    return 0


def cmd_sites(args: argparse.Namespace) -> int:
    """SPEC §8: hosts and domains with their figures, monster candidates first; then the
    URL-prefix neighbourhoods by badness."""
    from .reading.shards import state_sites

    levels = set(args.level or ("host", "domain", "neighbourhood"))
    sites, hoods = state_sites(args.state, levels, _warn, min_pages=args.min_pages,
                               monsters=args.monsters, bad=args.bad, top=args.top)
    _print_sites(sites, hoods, args.json)
    return 0


def cmd_label_chunks(args: argparse.Namespace) -> int:
    """SPEC §8's informed discovery: the paragraphs of a text, or of a page the state
    holds, join the labelled set L for good. On a `streamdet run` state the `site` events
    of the neighbourhoods this makes (or unmakes) bad go to --events; with --broker the
    labels go to the pipeline's gram shards, and its events to its events topic."""
    from .engine.chunks import text_keys
    if args.broker:
        return _label_pipeline(args)
    if args.text is not None:
        return _label_state(args, text_keys(_read_text(args.text)),
                            f"label-chunks --text {args.text}")
    return _label_state(args, None, args.url.strip())


def _label_state(args: argparse.Namespace, keys, what: str) -> int:
    """label-chunks on a `streamdet run` state (keys None: those of page `what`)."""
    from .adapters.chunk_labels import label_chunks

    states = args.state or [DEFAULT_STATE]
    if len(states) > 1 or all_shard_dirs(states) is not None:
        raise UsageError("worker states take labels through their pipeline: give --broker "
                         "(and --state only to name a page with --url)")
    store = open_store(states[0], must_exist=True)
    try:
        done = label_chunks(store, keys, what, args.events)
    except (LookupError, SinkError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        store.close()
    print(f"streamdet: {done.fresh} paragraph chunks labelled ({done.keys - done.fresh} of "
          f"the {done.keys} were already); {done.events} neighbourhood events",
          file=sys.stderr)
    return 0


def _label_pipeline(args: argparse.Namespace) -> int:
    """label-chunks --broker: the keys to the gram shards that own them (a page named by
    --url is read from the worker states given by --state)."""
    from .adapters.kafka import PipelineError, Topics
    from .adapters.publish import send_labels
    from .engine.chunks import text_keys
    from .reading.shards import pipeline_chunks

    if args.text is not None:
        keys, what = text_keys(_read_text(args.text)), f"label-chunks --text {args.text}"
    else:
        what = args.url.strip()
        keys = pipeline_chunks(args.state, what)
    try:
        shards = asyncio.run(send_labels(args.broker, keys, what, Topics.named(args.prefix)))
    except PipelineError as exc:
        raise UsageError(str(exc)) from None
    print(f"streamdet: {len(keys)} paragraph chunks sent to the pipeline's {shards} gram "
          "shards; its `site` events tell what they change", file=sys.stderr)
    return 0


def _read_text(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def _print_sites(sites: list[dict], hoods: list[dict], as_json: bool) -> None:
    """`sites` output: JSON lines, or a table of sites then one of neighbourhoods."""

    out = sys.stdout.buffer
    if as_json:
        for row in [*sites, *hoods]:
            out.write(json_line(row))
        out.flush()
        return
    if sites:
        out.write(b"monster  level   pages  pop mean  pop sd  patch mean  quilted  site\n")
        for r in sites:
            out.write((f"{'monster' if r['monster'] else '-':7}  {r['level']:6} "
                       f"{r['pages']:6d}  {r['pop_mean']:8.1f}  {r['pop_sd']:6.1f}  "
                       f"{r['patch_mean']:10.3f}  {r['quilted']:7d}  {r['site']}\n").encode())
    if hoods:
        out.write(b"\n" if sites else b"")
        out.write(b"bad   docs  badness  neighbourhood\n")
        for r in hoods:
            out.write((f"{'bad' if r['bad'] else '-':3}  {r['docs']:5d}  {r['badness']:7.3f}"
                       f"  {r['neighbourhood']}\n").encode())
    out.flush()


def cmd_worker(args: argparse.Namespace) -> int:
    from .adapters.kafka import Topics
    from .adapters.metrics import serve
    from .adapters.worker import Worker

    if not args.broker:
        raise UsageError("--broker HOST:PORT (or STREAMDET_BROKER) is required")
    if args.shards < 1:
        raise UsageError(f"--shards must be at least 1, got {args.shards}")
    params = params_of(args)
    analyzers = analysis_processes(args)
    check_page_timeout(args)
    budget = memory_budget(args, analyzers)
    log_to_stderr()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        port = serve(args.port, args.host) if args.port is not None else None
        if port is not None:
            print(f"streamdet: worker metrics on http://{args.host}:{port}/metrics",
                  file=sys.stderr, flush=True)
        worker = Worker(args.broker, args.state, params, args.shards,
                        topics=Topics.named(args.prefix), group=args.group or args.prefix,
                        max_body=args.max_body, analyzers=analyzers,
                        page_timeout=args.page_timeout, budget=budget)
        await worker.run(stop)

    asyncio.run(main())
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    from .adapters.kafka import Topics
    from .adapters.publish import produce

    sources = [open_source(p) for p in args.files]
    n = asyncio.run(produce(args.broker, sources, Topics.named(args.prefix), rate=args.rate,
                            shards=args.shards))
    print(f"streamdet: {n} records sent to the pages topic", file=sys.stderr)
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    from .adapters.kafka import Topics
    from .adapters.publish import print_events

    asyncio.run(print_events(args.broker, sys.stdout.buffer, args.idle, Topics.named(args.prefix)))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from .reading.explain import Missing, explain_json, explain_text
    from .reading.shards import find_page

    page = find_page(args.state, args.url, with_pairs=True)
    if isinstance(page, Missing):
        print(page.message)
        return 1
    if args.json:
        sys.stdout.buffer.write(json_line(explain_json(page)))
    else:
        colour = args.color == "always" or (
            args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
        text = explain_text(page, colour) + "\n"  # its page content escaped already
        if isinstance(sys.stdout, PlainStdout):
            sys.stdout.styled(text)
        else:
            sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def cmd_text(args: argparse.Namespace) -> int:
    from .reading.explain import Missing
    from .reading.shards import find_page

    page = find_page(args.state, args.url)
    if isinstance(page, Missing):
        print(page.message, file=sys.stderr)
        return 1
    if page.text is None:
        print(f"streamdet: the text of {page.url} was not kept (stored before texts were)",
              file=sys.stderr)
        return 1
    sys.stdout.write(page.text)
    if not page.text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


def _add_run(sub) -> None:
    """`run`: the embedded pipeline over files or stdin."""
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
    run.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                     help=f"records per atomic batch at most (default {DEFAULT_BATCH}; a "
                     "batch closes sooner once batches hold more documents than --memory "
                     "gives them, at a share of --memory's records in flight, and on a "
                     f"stream {BATCH_WAIT_S:g} s after its first record)")
    add_analysis_options(run)
    run.add_argument("--metrics-port", type=port_number, metavar="P",
                     help="serve Prometheus metrics on 127.0.0.1:P (0: any free port)")
    run.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY,
                     help="largest html/text body accepted, in bytes (default 10 MB)")
    add_params(run)
    run.set_defaults(func=cmd_run)


def _add_dump(sub) -> None:
    """`dump`: every document's result, or the pairs or clusters."""
    dump = sub.add_parser("dump", help="print every document's result as JSONL, sorted by URL")
    dump.add_argument("--state", action="append", metavar="DIR",
                      help="a `run` state, or worker state directories (repeatable)")
    dump.add_argument("--partial", action="store_true",
                      help="worker states that lack some doc shards: print the documents "
                      "of those they hold (refused otherwise)")
    what = dump.add_mutually_exclusive_group()
    what.add_argument("--partials", action="store_true",
                      help="print the partial-duplicate pairs (SPEC §7) instead: one line "
                      "per pair, sorted by (url, other)")
    what.add_argument("--clusters", action="store_true",
                      help="print the near-duplicate clusters (SPEC §6) instead: one line "
                      "per cluster of two or more pages, largest first, with its members")
    dump.set_defaults(func=cmd_dump)


def _add_prefix(p: argparse.ArgumentParser) -> None:
    """--prefix, the pipeline's topic names, for the commands that talk to its broker."""
    p.add_argument("--prefix", default=env("PREFIX", "streamdet"),
                   help="topic name prefix: PREFIX-pages, PREFIX-events, ... (default "
                   "streamdet)")


def _add_pipeline(sub) -> None:
    """`worker`, `produce` and `events`: the Kafka pipeline's commands."""
    wk = sub.add_parser("worker", help="join the Kafka pipeline as a worker")
    wk.add_argument("--broker", default=env("BROKER"), metavar="HOST:PORT")
    wk.add_argument("--state", default=env("STATE", DEFAULT_STATE), metavar="DIR",
                    help="directory for this worker's shard states")
    wk.add_argument("--port", type=port_number, default=env("PORT"),
                    help="HTTP port for /metrics (0: any free port; default: none)")
    wk.add_argument("--host", default=env("HOST", "127.0.0.1"), help="address for --port")
    wk.add_argument("--shards", type=int, default=int_env("SHARDS", 4),
                    help="doc and gram shards of the pipeline (default 4; all workers alike)")
    wk.add_argument("--group", default=env("GROUP"), help="consumer group (default: the prefix)")
    wk.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY)
    add_analysis_options(wk)
    add_params(wk, env_prefix=True)
    wk.set_defaults(func=cmd_worker)

    _add_prefix(wk)

    pr = sub.add_parser("produce", help="publish records to the pages topic")
    pr.add_argument("--broker", default=env("BROKER"), required=env("BROKER") is None,
                    metavar="HOST:PORT")
    pr.add_argument("--rate", type=float, help="records per second (default: as fast as possible)")
    pr.add_argument("--shards", type=int, default=int_env("SHARDS", 4),
                    help="shards, when this creates the pipeline's topics (default 4)")
    pr.add_argument("files", nargs="+", metavar="FILE")
    pr.set_defaults(func=cmd_produce)

    _add_prefix(pr)

    evs = sub.add_parser("events", help="print the events topic as JSONL")
    evs.add_argument("--broker", default=env("BROKER"), required=env("BROKER") is None,
                     metavar="HOST:PORT")
    evs.add_argument("--idle", type=float, default=5.0,
                     help="stop once no event arrived for this many seconds (default 5)")
    evs.set_defaults(func=cmd_events)
    _add_prefix(evs)


def _add_page_readers(sub) -> None:
    """`explain` and `text`: one page of a state."""
    exp = sub.add_parser("explain", help="say why a page is (not) quilted, and show what "
                         "each source's passages are")
    txt = sub.add_parser("text", help="print a page's visible text as the state keeps it")
    for sp in (exp, txt):
        sp.add_argument("url")
        sp.add_argument("--state", action="append", metavar="DIR",
                        help=f"a `streamdet run` state, or worker states (repeat --state; "
                        f"default {DEFAULT_STATE})")
    exp.add_argument("--json", action="store_true",
                     help="one JSON object: counts, sources with share and spans, the text")
    exp.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                     help="mark passages with a colour per source (auto: on a terminal, "
                     "unless NO_COLOR is set) or with [n> ... <n] markers")
    exp.set_defaults(func=cmd_explain)
    txt.set_defaults(func=cmd_text)


def _add_phrases(sub) -> None:
    """`phrases`: SPEC §8's popular phrases."""
    ph = sub.add_parser("phrases", help="the phrases (k-grams) on the most live pages, with "
                        "their page counts (SPEC §8's popular phrases)")
    ph.add_argument("--top", type=int, default=20, metavar="N",
                    help="how many (default 20; grams on two pages or more)")
    ph.add_argument("--state", action="append", metavar="DIR",
                    help=f"a `streamdet run` state, or the state of every worker (repeat "
                    f"--state; default {DEFAULT_STATE})")
    ph.add_argument("--json", action="store_true",
                    help='one {"phrase", "docs"} object per line')
    ph.set_defaults(func=cmd_phrases)


def _add_sites(sub) -> None:
    """`sites`: per-site statistics and neighbourhoods (SPEC §8)."""
    st = sub.add_parser("sites", help="hosts and domains with their page counts, pop(d) "
                        "mean and sd, patch fraction and quilted pages, monster candidates "
                        "first; then URL-prefix neighbourhoods by badness (SPEC §8)")
    st.add_argument("--state", action="append", metavar="DIR",
                    help=f"a `streamdet run` state, or the state of every worker (repeat "
                    f"--state; default {DEFAULT_STATE})")
    st.add_argument("--json", action="store_true",
                    help='one {"site", "level", "pages", "pop_mean", "pop_sd", "patch_mean", '
                    '"quilted", "monster"} object per line, then one {"neighbourhood", '
                    '"docs", "badness", "bad"} object per line')
    st.add_argument("--min-pages", type=int, default=2, metavar="N",
                    help="only sites and neighbourhoods of at least N live pages (default "
                    "2: one page has no figures of its own; 1 lists them all)")
    st.add_argument("--level", action="append", choices=("host", "domain", "neighbourhood"),
                    help="only these kinds of rows (repeat; default all three)")
    st.add_argument("--monsters", action="store_true",
                    help="only the sites that are monster candidates (and, with --bad, the "
                    "bad neighbourhoods)")
    st.add_argument("--bad", action="store_true",
                    help="only the bad neighbourhoods (and, with --monsters, the monster "
                    "candidates)")
    st.add_argument("--top", type=int, metavar="N",
                    help="the first N sites and the first N neighbourhoods only")
    st.set_defaults(func=cmd_sites)


def _add_label_chunks(sub) -> None:
    """`label-chunks`: paragraphs into the labelled set L (SPEC §8)."""
    lab = sub.add_parser("label-chunks", help="put the paragraphs of a text, or of a page "
                         "the state holds, in the labelled set L (SPEC §8's informed "
                         "discovery); prints the neighbourhood events it causes")
    what = lab.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", metavar="FILE", help="a text, one paragraph a line (- for "
                      "stdin)")
    what.add_argument("--url", metavar="URL", help="a page the state holds: its paragraphs")
    lab.add_argument("--state", action="append", metavar="DIR",
                     help=f"a `streamdet run` state (default {DEFAULT_STATE}); with "
                     "--broker and --url, the worker states that hold the page (repeat)")
    lab.add_argument("--events", default="-", metavar="PATH",
                     help="where the `site` events go (default -: stdout; with --broker "
                     "they go to the pipeline's events topic)")
    lab.add_argument("--broker", default=env("BROKER"), metavar="HOST:PORT",
                     help="label in a Kafka pipeline: the chunks go to its gram shards")
    lab.add_argument("--prefix", default=env("PREFIX", "streamdet"),
                     help="with --broker: the pipeline's topic name prefix (default streamdet)")
    lab.set_defaults(func=cmd_label_chunks)


def _add_similar(sub) -> None:
    """`similar`: a page against a state, without adding it."""
    sim = sub.add_parser("similar", help="the near-duplicates of a page and what it would be "
                         "made of, against a state, without adding it")
    which = sim.add_mutually_exclusive_group(required=True)
    which.add_argument("url", nargs="?", help="a page the state holds (asked with its kept text)")
    which.add_argument("--text", metavar="FILE", help="a page's text (- for stdin)")
    which.add_argument("--html", metavar="FILE", help="a page's HTML (- for stdin)")
    sim.add_argument("--url", dest="as_url", metavar="URL",
                     help="with --text/--html: the URL the page comes from (its server "
                     "decides which sources are foreign; a URL the state holds is asked "
                     "as its re-fetch)")
    sim.add_argument("--state", action="append", metavar="DIR",
                     help=f"a `streamdet run` state, or the state of every worker (repeat "
                     f"--state; default {DEFAULT_STATE})")
    sim.add_argument("--json", action="store_true", help="one JSON object")
    sim.set_defaults(func=cmd_similar)


def build_parser() -> argparse.ArgumentParser:
    """The command line: each command registered by its own function above, and a
    service's package (alerts, review, ranking) registering its own commands."""
    parser = argparse.ArgumentParser(prog="streamdet", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_dump(sub)
    _add_pipeline(sub)
    # a service's package registers its own commands: one import and one call each
    from .alerts.cli import add_parser as add_alerts_parser

    add_alerts_parser(sub)
    from .review.cli import add_parser as add_review_parser

    add_review_parser(sub)
    from .ranking.cli import add_parsers as add_ranking_parsers

    add_ranking_parsers(sub)
    _add_page_readers(sub)
    _add_phrases(sub)
    _add_sites(sub)
    _add_label_chunks(sub)
    _add_similar(sub)
    return parser


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def _total_text_streams() -> None:
    """Text written to stdout and stderr cannot fail on what a state or topic holds: a
    lone surrogate kept by an older version is written as `?`, and plain text on stdout
    has its control characters escaped (SPEC §9: every tool is total, and a crawled
    page's ESC sequences never reach a terminal). JSONL goes to the byte stream
    (adapters.outputs.json_line) and is unaffected."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    if sys.stdout is not None and not isinstance(sys.stdout, PlainStdout):
        sys.stdout = PlainStdout(sys.stdout)


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # its defaults read the environment
    except UsageError as exc:
        print(f"streamdet: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    _total_text_streams()
    if args.command in ("run", "worker"):
        tune_collector()  # these hold a large state for long
        tune_allocator()  # before any thread starts: threads share one trimmed heap
    if args.command == "run" and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)  # stop between batches, close the state
    try:
        return args.func(args)
    except (UsageError, InputError, ParamsError, StateDirError, StateError) as exc:
        print(f"streamdet: error: {exc}", file=sys.stderr)
        return 2
    except SinkError as exc:
        print(f"streamdet: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader of stdout went away (`streamdet dump | head`): stop quietly, and keep
        # Python from complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        if args.command == "run":
            print("streamdet: events output closed; stopped, the state is consistent up to "
                  "the last batch", file=sys.stderr)
            return 1
        return 0
    except KeyboardInterrupt:
        if args.command == "run":
            print("streamdet: interrupted; the state is consistent up to the last batch",
                  file=sys.stderr)
        return 130
    except OSError as exc:  # disk full, I/O error: one line, not a traceback
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"streamdet: error: {exc.strerror or exc}{where}", file=sys.stderr)
        if args.command == "run":
            print("streamdet: the state is consistent up to the last batch; run again "
                  "with the same --state to continue", file=sys.stderr)
        return 1
    except Exception as exc:  # last: the clauses above catch Exception subclasses too
        if type(exc).__name__ != "PipelineError":  # adapters.kafka, imported only when used
            raise
        print(f"streamdet: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
