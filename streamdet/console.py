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


# Control characters other than line breaks and tabs, as `\u001b`: a crawled page's ESC
# sequences would otherwise set a reviewer's terminal title or clear the screen (SPEC §9).
# JSON's own escape: a JSON line written as text stays the same JSON.
_CONTROLS = {c: f"\\u{c:04x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))
             if c not in (0x09, 0x0A)}


def escape_controls(text: str) -> str:
    """The text with its control characters (C0 but tab and line feed, DEL, C1) shown
    as `\\u00NN`: safe for a terminal, plain text however it is read, and inside a JSON
    string the same character."""
    return text.translate(_CONTROLS)


class PlainStdout:
    """stdout for plain text: whatever is written has its control characters escaped;
    `styled` writes a command's own escapes (explain's colours) as they are. JSONL goes
    to `buffer`, untouched."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        return self._inner.write(escape_controls(text))

    def styled(self, text: str) -> int:
        return self._inner.write(text)

    def __getattr__(self, name: str):  # buffer, flush, isatty, fileno, encoding, ...
        return getattr(self._inner, name)
