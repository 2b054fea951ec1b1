"""Failpoints: die at a named point of the pipeline, so tests can crash a worker exactly
where recovery matters (between a commit and the acknowledgement of what it queued)
rather than hoping a SIGKILL lands there.

`STREAMDET_FAILPOINT=name:n` makes the n-th pass through `hit(name)` end the process at
once with exit status 137, as SIGKILL would (no cleanup, no flush). Unset, `hit` is one
dictionary lookup.
"""

from __future__ import annotations

import os

EXIT_STATUS = 137  # what a shell reports for a SIGKILLed process
_passes: dict[str, int] = {}


def _armed() -> tuple[str, int] | None:
    spec = os.environ.get("STREAMDET_FAILPOINT")
    if not spec or ":" not in spec:
        return None
    name, _, count = spec.rpartition(":")
    return (name, int(count)) if count.isdigit() else None


def hit(name: str) -> None:
    """Count a pass through `name`; die here when the armed count is reached."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] >= armed[1]:
        os._exit(EXIT_STATUS)
