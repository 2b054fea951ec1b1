"""Tests read the real data from their own slice in tests/data, never from ../shared.

loadtest/corpus.py finds its data through $STREAMDET_DATA (benchmarks default to the full
../shared/data). It is set here, before any test module is imported, so that the corpus,
and every process a test starts, reads the slice whatever the caller's environment says.

The tests on the session's Kafka broker run first: they are the longest (real workers
join groups, crash and take over), and pytest-xdist hands tests out in collection order,
so a long test handed out last would leave the other processes idle while it ends.
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
    module's tests stay together, so its module-scoped fixtures are built once)."""
    items.sort(key=lambda item: "kafka_broker" not in getattr(item, "fixturenames", ()))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _before is None:
        os.environ.pop(_ENV, None)
    else:
        os.environ[_ENV] = _before
