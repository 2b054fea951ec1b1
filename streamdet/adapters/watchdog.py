"""Page analysis in child processes under a watchdog (SPEC §9, "bounded analysis").

Parsing runs C code (lexbor) that no signal interrupts, and markup can make it slow or
make it allocate without bound. So pages are analysed only in processes that have
nothing else to do. Each publishes which page it is on and when it began it (shared
memory) and sends its results in chunks; the parent watches with a deadline per page:

- a page still in hand `page_timeout` seconds after it began is dead-lettered
  `too_slow`; its process is killed and replaced, and the rest goes on in the new one
  (the pages of the last chunk not received are analysed again);
- a process that dies (a crash in the parser, the kernel's OOM killer) costs the page in
  hand alone, dead-lettered `unparsable`, and is replaced the same way;
- each process runs under an address-space limit (MEMORY_LIMIT), so a page that
  allocates without bound fails with MemoryError - a dead letter - instead of taking the
  machine's memory.

Jobs are pipelined: a feeder thread sends the next batch while the process works on the
current one (a child reads jobs from its pipe as soon as it is free), and a watcher
thread receives results, completes the jobs' futures in order and enforces the
deadlines. `abort()` kills every process at once: a stop must not wait for a page.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import resource
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..engine.params import Params
from .allocator import tune_allocator
from .inputs import payload_bytes

MEMORY_LIMIT = 2 << 30  # bytes of address space per analysis process (baseline ~200 MB)
DEFAULT_PAGE_TIMEOUT = 10.0
_POLL_S = 0.05
_CHUNK, _CHUNK_S = 64, 0.25  # a child sends results after this many pages or seconds
# A job goes to its child in pieces of about this many bytes of payload: what a batch
# costs in flight is then one piece in the child and one pickled piece in the parent, not
# two whole copies of the batch (at 85 MB batches, ~250 MB of the two processes' peaks).
PIECE_BYTES = 4 << 20


class Aborted(RuntimeError):
    """The pool was aborted (the process is stopping) while a batch was in hand."""


def _die_with_parent(parent: int) -> None:
    """In a child: exit when the parent does, even if it was killed with SIGKILL (Linux;
    elsewhere the child exits when its pipe closes). The parent may have died while this
    process was starting, before the request was made: then exit now."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent:
        os._exit(1)


def _serve(jobs, results, progress, parent: int, params: Params, max_body: int,
           memory: int) -> None:
    """A child: jobs (job, first page index, payloads) in; (job, index, results) out."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this one stops
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    except (ValueError, OSError):
        pass
    tune_allocator()  # a job's parse trees and arrays go back when freed
    from ..engine import markup_guard
    from . import failpoints
    from .payloads import analyze_payloads, warm_up

    # Benchmarks only: STREAMDET_MARKUP_GUARD=off parses markup as it comes, to measure
    # what the guard costs (loadtest/bench_hostile.py).
    markup_guard.ENABLED = os.environ.get("STREAMDET_MARKUP_GUARD", "on") != "off"
    warm_up(params, max_body)
    results.send(None)  # ready
    while True:
        try:
            job = jobs.recv()
        except Exception:  # noqa: BLE001 - the parent is gone (a pipe closed mid-message)
            return
        if job is None:
            return
        ident, first, payloads = job
        done: list = []
        start, sent_at = first, time.monotonic()
        for i, payload in enumerate(payloads, first):
            progress[2] = time.monotonic_ns()
            progress[0], progress[1] = ident, i
            failpoints.hit("analysis-page")  # tests: a page that kills or stalls this one
            done.extend(analyze_payloads([payload], params, max_body))
            if len(done) >= _CHUNK or time.monotonic() - sent_at > _CHUNK_S:
                results.send((ident, start, done))  # a kill costs one chunk's work
                start, done, sent_at = i + 1, [], time.monotonic()
        progress[1] = -1
        results.send((ident, start, done))


@dataclass
class _Job:
    ident: int
    payloads: list
    future: Future
    results: dict = field(default_factory=dict)  # page index -> result


class AnalysisProcess:
    """One child process, the feeder and watcher threads of the parent's side."""

    def __init__(self, params: Params, max_body: int, page_timeout: float,
                 memory: int = MEMORY_LIMIT) -> None:
        self.params, self.max_body = params, max_body
        self.page_timeout, self.memory = page_timeout, memory
        self.replaced = 0  # processes killed or lost (metrics)
        self._ctx = multiprocessing.get_context("spawn")  # the parent holds RocksDB threads
        self._lock = threading.Lock()
        self._pending: deque[_Job] = deque()  # submitted, not complete, in order
        self._feed: queue.SimpleQueue = queue.SimpleQueue()  # (generation, job message)
        self._next_ident = 0
        self._closed = False
        self._generation = 0
        self._start()
        self._feeder = threading.Thread(target=self._feed_loop, name="streamdet-analysis-feed",
                                        daemon=True)
        self._watcher = threading.Thread(target=self._watch_loop,
                                         name="streamdet-analysis-watch", daemon=True)
        self._feeder.start()
        self._watcher.start()

    # -- the child ----------------------------------------------------------------------
    def _start(self) -> None:
        """A new child, with its pipes and progress; `proc` is always a started process,
        so a child that could not be started leaves the last one (dead) in its place."""
        progress = self._ctx.Array("q", [-1, -1, 0], lock=False)  # job, page, began
        jobs, jobs_child = self._ctx.Pipe(duplex=False)[::-1]
        results, results_child = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(
            target=_serve, name="streamdet-analysis", daemon=True,
            args=(jobs_child, results_child, progress, os.getpid(), self.params,
                  self.max_body, self.memory))
        try:
            proc.start()
        except BaseException:
            jobs.close()
            results.close()
            raise
        finally:
            jobs_child.close()
            results_child.close()
        self.progress, self._jobs, self._results, self.proc = progress, jobs, results, proc
        self._ready = False

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)

    # -- submitting -----------------------------------------------------------------------
    def submit(self, payloads: list) -> Future:
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise Aborted("the analysis pool is closed")
            job = _Job(self._next_ident, list(payloads), fut)
            self._next_ident += 1
            self._pending.append(job)
            if not job.payloads:
                self._complete()
            else:
                self._send(job, 0, len(job.payloads))
        return fut

    def _send(self, job: _Job, start: int, end: int) -> None:
        """Queue payloads [start, end) of a job for the child, in pieces of about
        PIECE_BYTES (with the lock held)."""
        payloads = job.payloads
        while start < end:
            stop, size = start, 0
            while stop < end and (stop == start or size < PIECE_BYTES):
                size += payload_bytes(payloads[stop])
                stop += 1
            self._feed.put((self._generation, (job.ident, start, payloads[start:stop])))
            start = stop

    def _feed_loop(self) -> None:
        """Send jobs in order; a job of an older generation (its process was replaced
        since) was queued again by the watcher and is skipped."""
        while True:
            item = self._feed.get()
            if item is None:
                return
            generation, message = item
            with self._lock:
                current, conn = self._generation, self._jobs
            if generation != current:
                continue
            try:
                conn.send(message)
            except Exception:  # noqa: BLE001 - the process died or the pool closed meanwhile:
                pass  # the watcher sends what was not done again (or nothing is waiting)

    # -- watching -------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed and not self._pending:
                    return
            try:
                self._watch_once()
            except Exception as exc:  # noqa: BLE001 - fail the jobs, not the thread
                with self._lock:  # no one is left to watch a job submitted after this
                    self._closed = True
                self._fail_all(exc)
                return

    def _watch_once(self) -> None:
        try:
            if not self._results.poll(_POLL_S):
                self._check()
                return
            message = self._results.recv()
        except (EOFError, OSError):
            self._check(lost=True)
            return
        self._receive(message)

    def _receive(self, message) -> None:
        """A chunk of results (or the child's "ready"): to its job, and the jobs that are
        complete now resolved."""
        if message is None:
            self._ready = True
            return
        ident, start, results = message
        with self._lock:
            for job in self._pending:
                if job.ident == ident:
                    job.results.update(enumerate(results, start))
                    break
            self._complete()

    def _complete(self) -> None:
        """Resolve the jobs that have every result, in order (with the lock held)."""
        while self._pending and len(self._pending[0].results) == len(self._pending[0].payloads):
            job = self._pending.popleft()
            if not job.future.done():
                job.future.set_result([job.results[i] for i in range(len(job.payloads))])

    def _check(self, lost: bool = False) -> None:
        """A dead process, or a page past its deadline: that page fails, the process is
        replaced, and what it had not finished is sent to the new one."""
        if not lost and self.proc.is_alive():
            ident, index, began = self.progress[0], self.progress[1], self.progress[2]
            if index < 0 or (time.monotonic_ns() - began) / 1e9 <= self.page_timeout:
                return
            self.kill()
            failure = ("too_slow", f"analysis took longer than {self.page_timeout:g} s "
                       "(--page-timeout); the page was not analysed")
        else:
            while self._drain():  # results sent before it died
                pass
            if not self._pending:
                if not self.proc.is_alive():
                    self._replace()
                return
            ident, index = self.progress[0], self.progress[1]
            self.kill()
            if not self._ready:  # it died starting: another would too
                self._fail_all(RuntimeError(f"the analysis process exited while starting "
                                            f"(exit code {self.proc.exitcode})"))
                self._replace()
                return
            code = self.proc.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
            failure = ("unparsable", f"the analysis process died on this page ({how})")
        with self._lock:
            for job in self._pending:
                if job.ident == ident and 0 <= index < len(job.payloads):
                    job.results[index] = failure
            self._complete()
        self._replace()

    def _drain(self) -> bool:
        try:
            if not self._results.poll(0):
                return False
            message = self._results.recv()
        except (EOFError, OSError):
            return False
        self._receive(message)
        return True

    def _replace(self) -> None:
        """A new process; every page of the pending jobs without a result is sent to it."""
        for conn in (self._jobs, self._results):
            conn.close()
        self.replaced += 1
        with self._lock:
            self._generation += 1
            self._start()
            for job in self._pending:
                missing = [i for i in range(len(job.payloads)) if i not in job.results]
                for run in _runs(missing):
                    self._send(job, run[0], run[-1] + 1)

    def _fail_all(self, exc: BaseException) -> None:
        with self._lock:
            while self._pending:
                job = self._pending.popleft()
                if not job.future.done():
                    job.future.set_exception(exc)

    # -- stopping -------------------------------------------------------------------------
    def abort(self) -> None:
        """Kill the process now; jobs not complete raise Aborted."""
        with self._lock:
            self._closed = True
        self.kill()
        self._fail_all(Aborted("analysis aborted"))
        self._feed.put(None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._watcher.join(timeout=self.page_timeout + 5)
        self._feed.put(None)
        try:
            self._jobs.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(timeout=2)
        self.kill()
        self._fail_all(Aborted("the analysis pool is closed"))


def _runs(indexes: list[int]) -> list[list[int]]:
    """Consecutive runs of sorted indexes: [1, 2, 3, 7, 8] -> [[1, 2, 3], [7, 8]]."""
    runs: list[list[int]] = []
    for i in indexes:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


class AnalysisPool:
    """N analysis processes; `submit(payloads)` returns a Future of the results, sent to
    the process with the fewest pages in hand."""

    def __init__(self, processes: int, params: Params, max_body: int,
                 page_timeout: float = DEFAULT_PAGE_TIMEOUT,
                 memory: int = MEMORY_LIMIT) -> None:
        if processes < 1:
            raise ValueError("an analysis pool needs at least one process")
        self._all = [AnalysisProcess(params, max_body, page_timeout, memory)
                     for _ in range(processes)]

    @property
    def replaced(self) -> int:
        return sum(p.replaced for p in self._all)

    def submit(self, payloads: list) -> Future:
        proc = min(self._all, key=lambda p: sum(len(j.payloads) - len(j.results)
                                                for j in list(p._pending)))
        return proc.submit(payloads)

    def analyze(self, payloads: list) -> list:
        return self.submit(payloads).result()

    def abort(self) -> None:
        """Kill every process now; batches in hand raise Aborted."""
        for p in self._all:
            p.abort()

    def close(self) -> None:
        for p in self._all:
            p.close()
