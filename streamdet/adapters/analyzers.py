"""Page analysis (validate, parse, tokenize, hash) ahead of the engine, in worker processes.

Analysis is pure and per record, and it is most of a page's CPU cost, so the embedded
runner hands whole batches to a small process pool and applies batch i while batch i+1 is
being analysed: on a machine with two cores the engine no longer waits for parsing. With
`processes=0` everything runs in this process (tests, one-core machines). Results come
back in input order, and the pool never runs more than `processes + 1` batches ahead, so
memory stays bounded whatever the input size.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor

from ..engine.params import Params
from ..engine.records import BadRecord, Page, decode, page_from_object
from .inputs import RawRecord, record_limit


def _die_with_parent(parent: int) -> None:
    """In a pool worker: exit when the runner does, even if it was killed with SIGKILL
    (Linux; elsewhere the worker exits when its task pipe closes). The runner may have
    died while this worker was starting, before the request was made: then exit now."""
    import signal
    import sys

    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent:
        os._exit(1)
    from ..engine import analysis  # noqa: F401 - import now, not in the first task


def default_processes() -> int:
    """One analysis process when there is a core to spare for it, else none."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 1 if (cores or 1) >= 2 else 0


def analysis_pool(processes: int) -> ProcessPoolExecutor:
    """Processes for analyze_payloads that die with this one."""
    # spawn, not fork: the parent holds RocksDB threads and locks; a fresh interpreter
    # imports only what analysis needs.
    return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_die_with_parent, initargs=(os.getpid(),))


def validate(payload: bytes | dict, max_body: int) -> Page:
    """A record's payload (SPEC §2) as a Page, or BadRecord with its reason."""
    obj = payload
    if not isinstance(obj, dict):
        if len(obj) > record_limit(max_body):
            raise BadRecord("too_large", f"record is larger than the limit for a body of "
                            f"{max_body:,} bytes")
        obj = decode(obj)
    try:
        return page_from_object(obj, max_body)
    except BadRecord:
        raise
    except (ValueError, OverflowError, TypeError) as exc:
        raise BadRecord("unparsable", f"{type(exc).__name__}: {str(exc)[:200]}") from None


def analyze_payloads(payloads: list[bytes | dict], params: Params, max_body: int) -> list:
    """Each payload as Analyzed, or as (reason, detail) when it is a bad record (plain
    tuples cross process boundaries without custom pickling)."""
    from ..engine.analysis import analyze

    out: list = []
    for payload in payloads:
        try:
            page = validate(payload, max_body)
            try:
                out.append(analyze(page, params))
            except (RecursionError, ValueError, UnicodeError, OverflowError) as exc:
                # The engine could not read this page; one page must not stop the stream.
                raise BadRecord("unparsable", f"page cannot be analysed: "
                                f"{type(exc).__name__}: {str(exc)[:200]}") from None
        except BadRecord as err:
            out.append((err.reason, err.detail))
    return out


class Analyzers:
    """Analyse batches of records in order, `processes` workers ahead of the caller."""

    def __init__(self, params: Params, max_body: int, processes: int) -> None:
        self.params = params
        self.max_body = max_body
        self.processes = processes
        self._pool = analysis_pool(processes) if processes > 0 else None

    def run(self, batches: Iterable[list[RawRecord]]
            ) -> Iterator[tuple[list[RawRecord], list]]:
        """(batch, results) in input order; a result is Analyzed or BadRecord.

        The first batch is analysed here while the pool starts on the second (starting
        the workers takes about a second), so an input of one batch never waits for it."""
        it = iter(batches)
        first = next(it, None)
        if first is None:
            return
        if self._pool is None:
            yield first, self._results(first, self._analyze(first))
            for batch in it:
                yield batch, self._results(batch, self._analyze(batch))
            return
        pending: deque[tuple[list[RawRecord], Future]] = deque()
        second = next(it, None)
        if second is not None:
            pending.append(self._submit(second))
        yield first, self._results(first, self._analyze(first))
        for batch in it:
            pending.append(self._submit(batch))
            if len(pending) > self.processes:
                done, fut = pending.popleft()
                yield done, self._results(done, fut.result())
        while pending:
            done, fut = pending.popleft()
            yield done, self._results(done, fut.result())

    def _submit(self, batch: list[RawRecord]) -> tuple[list[RawRecord], Future]:
        return batch, self._pool.submit(
            analyze_payloads, [r.payload for r in batch if r.error is None],
            self.params, self.max_body)

    def _analyze(self, batch: list[RawRecord]) -> list:
        return analyze_payloads([r.payload for r in batch if r.error is None],
                                self.params, self.max_body)

    @staticmethod
    def _results(batch: list[RawRecord], analysed: list) -> list:
        """Merge back the records the reader had already found bad."""
        it = iter(analysed)
        out = []
        for rec in batch:
            if rec.error is not None:
                out.append(rec.error)
                continue
            r = next(it)
            out.append(BadRecord(*r) if isinstance(r, tuple) else r)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
