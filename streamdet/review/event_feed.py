"""The review desk's view in embedded mode, fed by `streamdet run --events FILE`.

Each poll reads the whole lines appended since the last one and folds their events into
the view (projection.py), so the desk follows a run that is still going. A line that is
not an event is passed over and counted. A file that shrank below what was read was
replaced: the view is built again from its start."""

from __future__ import annotations

import os

from .projection import View, apply, event_of

READ_CHUNK = 1 << 20  # bytes read at a time
LINE_LIMIT = 64 << 20  # a longer line is no event (they are KBs): passed over, unread


class EventFeed:
    def __init__(self, path: str) -> None:
        self.path = path
        self._reset()

    def _reset(self) -> None:
        self.offset = 0  # bytes read and folded: always at a line start
        self.view = View()
        self.events = 0
        self.skipped = 0  # lines that were not events (of SPEC §3's shapes)

    def poll(self) -> int:
        """Fold what was appended since the last poll; the events folded (0 while the
        file does not exist yet)."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return 0
        with f:
            if os.fstat(f.fileno()).st_size < self.offset:  # replaced: start again
                self._reset()
            f.seek(self.offset)
            folded = 0
            while chunk := f.read(READ_CHUNK):
                end = chunk.rfind(b"\n") + 1
                if end == 0:  # no whole line in a chunk: read on until one ends
                    more = f.readline(LINE_LIMIT)
                    if not more.endswith(b"\n"):
                        if len(more) < LINE_LIMIT:
                            break  # a line still being written
                        rest = _rest_of_line(f)
                        if rest is None:
                            break
                        self.skipped += 1
                        self.offset += len(chunk) + len(more) + rest
                        f.seek(self.offset)
                        continue
                    chunk, end = chunk + more, len(chunk) + len(more)
                folded += self._fold(chunk[:end])
                self.offset += end
                f.seek(self.offset)
        self.events += folded
        return folded

    def _fold(self, lines: bytes) -> int:
        n = 0
        for line in lines.splitlines():
            ev = event_of(line)
            if ev is None:
                self.skipped += 1
                continue
            apply(self.view, ev)
            n += 1
        return n


def _rest_of_line(f) -> int | None:
    """Bytes up to and including the next newline, read and dropped (None: the file ends
    first, the line still being written)."""
    n = 0
    while block := f.read(READ_CHUNK):
        at = block.find(b"\n")
        if at >= 0:
            return n + at + 1
        n += len(block)
    return None
