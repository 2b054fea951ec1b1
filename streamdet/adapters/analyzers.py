"""Page analysis (validate, parse, tokenize, hash: adapters.payloads) ahead of the engine.

Analysis is pure and per record, and most of a page's CPU cost, so the embedded runner
hands whole batches to watched analysis processes (adapters.watchdog) and applies batch
i while batch i+1 is being analysed. Results come back in input order, and no more than
`processes + 1` batches are in flight, so memory stays bounded whatever the input size.
With `processes=0` everything runs in this process, without a watchdog (tests).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future

from ..engine.params import Params
from ..engine.records import BadRecord
from .inputs import RawRecord
from .payloads import analyze_payloads
from .watchdog import DEFAULT_PAGE_TIMEOUT, AnalysisPool


def default_processes() -> int:
    """One analysis process: on two cores it parses beside the engine, and on any
    machine it is what the watchdog can kill (a parse in C cannot be interrupted)."""
    return 1


class Analyzers:
    """Analyse batches of records in order, in `processes` watched processes that run up
    to `processes + 1` batches ahead of the caller (processes=0: in this process, with
    no watchdog - for tests and one-core machines)."""

    def __init__(self, params: Params, max_body: int, processes: int,
                 page_timeout: float = DEFAULT_PAGE_TIMEOUT) -> None:
        self.params = params
        self.max_body = max_body
        self.processes = processes
        self._pool = (AnalysisPool(processes, params, max_body, page_timeout)
                      if processes > 0 else None)

    @property
    def replaced(self) -> int:
        """Analysis processes replaced so far (a page too slow, or a crash)."""
        return 0 if self._pool is None else self._pool.replaced

    def run(self, batches: Iterable[list[RawRecord]]
            ) -> Iterator[tuple[list[RawRecord], list]]:
        """(batch, results) in input order; a result is Analyzed or BadRecord. An empty
        batch (a quiet input) is not analysed: it hands back all batches in flight."""
        if self._pool is None:
            for batch in batches:
                if batch:
                    yield batch, self._results(batch, analyze_payloads(
                        self._payloads(batch), self.params, self.max_body))
            return
        pending: deque[tuple[list[RawRecord], Future]] = deque()
        for batch in batches:
            if not batch:  # the input is quiet: hand back every batch in flight
                while pending:
                    done, fut = pending.popleft()
                    yield done, self._results(done, fut.result())
                continue
            pending.append((batch, self._pool.submit(self._payloads(batch))))
            if len(pending) > self.processes:
                done, fut = pending.popleft()
                yield done, self._results(done, fut.result())
        while pending:
            done, fut = pending.popleft()
            yield done, self._results(done, fut.result())

    @staticmethod
    def _payloads(batch: list[RawRecord]) -> list:
        return [r.payload for r in batch if r.error is None]

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

    def abort(self) -> None:
        """Stop now, whatever page is in hand (the caller is being stopped)."""
        if self._pool is not None:
            self._pool.abort()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
