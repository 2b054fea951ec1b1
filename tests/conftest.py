"""Tests read the real data from their own slice in tests/data, never from ../shared.

loadtest/corpus.py finds its data through $STREAMDET_DATA (benchmarks default to the full
../shared/data). It is set here, before any test module is imported, so that the corpus,
and every process a test starts, reads the slice whatever the caller's environment says.

The tests on the session's Kafka broker run first: they are the longest (real workers
join groups, crash and take over), and pytest-xdist hands tests out in collection order,
so a long test handed out last would leave the other processes idle while it ends. They
mostly wait (on group joins, rebalances, worker processes), so with more than two
pytest-xdist processes they are dealt into one run fewer than there are processes, each
placed where a process's first share of the collection starts (`--dist worksteal`, as
scripts/test runs it, hands each process one of equal consecutive shares to start with,
then moves tests from the end of the longest queue to a process that runs out), and the
process left over runs the other tests meanwhile.
"""

from __future__ import annotations

import os

import pytest

from .cli_helpers import DATA

_ENV = "STREAMDET_DATA"
_before: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _before
    _before = os.environ.get(_ENV)
    os.environ[_ENV] = str(DATA)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that use the Kafka broker first, each group in its own order (a
    module's tests stay together, so its module-scoped fixtures are built once); with
    more than two processes, dealt in turn into their runs (the tests of a module-scoped
    fixture that holds something on the broker, a pipeline or a desk, in one run, as it
    is built once a process), each run at the start of a process's first share."""
    on_broker = [item for item in items if _on_broker(item)]
    others = [item for item in items if not _on_broker(item)]
    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    runs: list[list[pytest.Item]] = [[] for _ in range(max(1, processes - 1))]
    units: dict[object, int] = {}  # a unit's run: a test's, or a shared fixture's
    for item in on_broker:
        unit = _shared_on_broker(item) or item.nodeid
        runs[units.setdefault(unit, len(units) % len(runs))].append(item)
    ordered: list[pytest.Item] = []
    rest = iter(others)
    for run, start in zip(runs, _share_starts(len(items), processes), strict=False):
        while len(ordered) < start and (item := next(rest, None)) is not None:
            ordered.append(item)
        ordered += run
    items[:] = ordered + list(rest)


def _share_starts(n: int, processes: int) -> list[int]:
    """Where each process's first share of n tests starts: worksteal gives each in turn
    an equal part of what is left."""
    starts, given = [], 0
    for left in range(processes, 0, -1):
        starts.append(given)
        given += (n - given) // left
    return starts


def _on_broker(item: pytest.Item) -> bool:
    return "kafka_broker" in getattr(item, "fixturenames", ())


def _shared_on_broker(item: pytest.Item) -> tuple[str, str] | None:
    """The module-scoped fixture on the Kafka broker the test uses, if any."""
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        if defs[-1].scope != "function" and "kafka_broker" in defs[-1].argnames:
            return item.module.__name__, name
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    if _before is None:
        os.environ.pop(_ENV, None)
    else:
        os.environ[_ENV] = _before
