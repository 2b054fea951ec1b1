"""Failpoints: die at a named point of the pipeline, so tests can crash a worker exactly
where recovery matters (between a commit and the acknowledgement of what it queued)
rather than hoping a SIGKILL lands there.

`STREAMDET_FAILPOINT=name:n` makes the n-th pass through `hit(name)` end the process at
once with exit status 137, as SIGKILL would (no cleanup, no flush); `name:n:stall` makes
it hang there instead, as a page that the parser never finishes would (and, when
STREAMDET_FAILPOINT_STALLED names a file, creates that file first, so that a test acts
on the stall the moment it holds, not after a guess at how long reaching it takes);
`name:n:raise` raises `Failpoint` there, as a send the broker never acknowledges would.
Unset, `hit` is one dictionary lookup.
"""

from __future__ import annotations

import os
import time

EXIT_STATUS = 137  # what a shell reports for a SIGKILLed process
_passes: dict[str, int] = {}


class Failpoint(RuntimeError):
    """Raised by an armed `name:n:raise` failpoint."""


def _armed() -> tuple[str, int, str] | None:
    spec = os.environ.get("STREAMDET_FAILPOINT")
    if not spec or ":" not in spec:
        return None
    parts = spec.split(":")
    action = parts.pop() if len(parts) > 2 else "exit"
    name, count = ":".join(parts[:-1]), parts[-1]
    return (name, int(count), action) if count.isdigit() else None


def hit(name: str) -> None:
    """Count a pass through `name`; die (or stall) here when the armed count is reached."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] == armed[1]:
        if armed[2] == "stall":
            if marker := os.environ.get("STREAMDET_FAILPOINT_STALLED"):
                open(marker, "w").close()  # noqa: SIM115 - created, nothing to write
            while True:
                time.sleep(3600)
        if armed[2] == "raise":
            raise Failpoint(f"failpoint {name} (pass {armed[1]})")
        os._exit(EXIT_STATUS)
