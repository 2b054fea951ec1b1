"""Plumbing shared by every command: defaults from the environment (STREAMDET_<NAME>, how
a container configures streamdet), the error a user can fix, logging to stderr."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class UsageError(RuntimeError):
    """A problem the user can fix: printed as one line, exit status 2."""


def env(name: str, default: str | None = None) -> str | None:
    """The setting STREAMDET_<NAME>; `default` when unset."""
    return os.environ.get(f"STREAMDET_{name}", default)


def env_as(name: str, cast: Callable[[str], T], default: T | None = None) -> T | None:
    """STREAMDET_<NAME> converted by `cast` (int, float); a bad value is a UsageError
    naming the variable, not a traceback."""
    value = env(name)
    if value in (None, ""):
        return default
    try:
        return cast(value)
    except ValueError:
        raise UsageError(f"STREAMDET_{name} must be a number ({cast.__name__}), "
                         f"got {value!r}") from None


def int_env(name: str, default: int | None = None) -> int | None:
    return env_as(name, int, default)


def log_to_stderr() -> None:
    """streamdet's INFO and up, other libraries' WARNING and up, one line each."""
    logging.basicConfig(format="streamdet: %(levelname)s %(name)s: %(message)s",
                        level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("streamdet").setLevel(logging.INFO)
