"""Dead letters of a flood: a long run of bad records of one kind costs one dead letter a
batch, not one a record.

A small gzip of one short bad line repeated is as many bad records, and a dead letter each
(reason, sentence, source, index, offset, size, SHA-256) is many times the few bytes it
reports: a small compressed input could fill a disk with its dead letters (SPEC §9: dead
letters are bounded whatever an input inflates to). So once RUN_AFTER
consecutive records of one source are dead letters for one reason, those that follow join
a *run*: one dead letter, written when the run breaks or its batch ends, with the run's
first index and offset, how many records it holds, their bytes one a line up to 64 KiB,
and the size and SHA-256 of all their bytes. The first RUN_AFTER keep a dead letter each,
so a few bad records read as before, and every record is still counted by its reason.
A flood's dead letters then take about twice the bytes of its records (a newline is two
characters in JSON) and a few hundred bytes a batch, however small its records are.
"""

from __future__ import annotations

from ..engine.records import BadRecord
from .inputs import Prefixed, RawRecord
from .outputs import JsonlSink, as_text, dead_letter, json_line, json_safe, utc_now

RUN_AFTER = 100  # consecutive dead letters of one source and reason before a run starts


class _Run:
    """The records of a run so far: the first one's place and sentence, how many, and what
    is kept of their bytes, one a line."""

    __slots__ = ("first", "error", "count", "bytes")

    def __init__(self, rec: RawRecord, err: BadRecord) -> None:
        self.first, self.error = rec, err
        self.count = 0
        self.bytes = Prefixed()

    def add(self, raw: bytes) -> None:
        self.count += 1
        self.bytes.add(raw + b"\n")

    def letter(self) -> dict:
        rec, read = self.first, self.bytes
        out = {"reason": self.error.reason, "error": self.error.detail, "source": rec.source,
               "index": rec.index, "count": self.count, "at": utc_now()}
        if rec.offset is not None:
            out["offset"] = rec.offset
        out.update(as_text(bytes(read.kept), cut=read.size > len(read.kept), field="records"))
        out["record_size"] = read.size
        out["record_sha256"] = read.sha.hexdigest()
        if read.size > len(read.kept):
            out["record_truncated"] = True
        return out


def _raw(payload: bytes | dict) -> bytes:
    """A record's bytes as read (JSONL), or a WARC record's object as a JSON line."""
    return payload if isinstance(payload, bytes) else json_line(json_safe(payload))[:-1]


class DeadLetters:
    """The dead-letter sink of a run: a dead letter a bad record, runs merged (see above)."""

    def __init__(self, sink: JsonlSink) -> None:
        self.sink = sink
        self._last: tuple[str, str] | None = None  # (source, reason) of the last one
        self._next = -1  # the index that continues the streak
        self._streak = 0
        self._run: _Run | None = None

    def write(self, rec: RawRecord, err: BadRecord) -> None:
        key = (rec.source, err.reason)
        if key == self._last and rec.index == self._next and rec.size is None:
            self._streak += 1
        else:
            self._end_run()
            self._streak = 1
        self._last, self._next = key, rec.index + 1
        if self._streak <= RUN_AFTER or rec.size is not None:  # a prefix only: on its own
            self.sink.write(dead_letter(rec, err))
            return
        if self._run is None:
            self._run = _Run(rec, err)
        self._run.add(_raw(rec.payload))

    def flush(self) -> None:
        """End the batch: its run, if any, is written (the next batch's records go on
        with the streak, in a run of their own), then the sink is flushed."""
        self._end_run()
        self.sink.flush()

    def _end_run(self) -> None:
        if self._run is not None:
            self.sink.write(self._run.letter())
            self._run = None
