"""Files a module-scoped fixture builds once for the whole test run, not once in each
pytest-xdist process that runs some of the module's tests: the first process to ask
builds them (under a lock), the others wait for it and read what it built.

Only for data that tests read and never change (an input file, a reference state that
commands open read-only, the dump of a run): sharing it couples no test to another.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

_DONE = ".built"  # written last: a directory without it is a build cut short


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], None]) -> Path:
    """The directory `build(directory)` filled, built by the first process of this test
    run to ask for `name`."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's base directory, which its xdist processes share
    target = root / f"built-{name}"
    with open(root / f"built-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (target / _DONE).exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            build(target)
            (target / _DONE).touch()
    return target
