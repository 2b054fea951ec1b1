"""Tests read the real data from their own slice in tests/data, never from ../shared.

loadtest/corpus.py finds its data through $STREAMDET_DATA (benchmarks default to the full
../shared/data). It is set here, before any test module is imported, so that the corpus,
and every process a test starts, reads the slice whatever the caller's environment says.
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


def pytest_unconfigure(config: pytest.Config) -> None:
    if _before is None:
        os.environ.pop(_ENV, None)
    else:
        os.environ[_ENV] = _before
