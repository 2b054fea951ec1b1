"""Reading an internal partition without a hole: a shard applies its input records in
offset order, each exactly once, so the records it takes must follow on from its state's
offset with no offset missing.

Our producers write the internal topics without transactions or compaction, so every
offset holds a record and a gap in a fetch is a batch the broker cannot serve yet. tansu
advances a partition's high watermark before it stores the batch, so a fetch that arrives
in between, while a later batch (another worker's) is already stored, returns the later
batch without the earlier one (`python -m loadtest.broker_gaps`). A real Kafka broker
serves no such gap. The reader takes the records up to the gap, reads again from
it, and gives up only when the same offset stays missing for GAP_PATIENCE_S: then records
are lost for good (retention, a broker that lost data), and applying what follows them
would corrupt the state."""

from __future__ import annotations

from collections.abc import Sequence

# Longer than a produce request may take (adapters.kafka.producer: 30 s): a batch the
# watermark counts is stored by then or never.
GAP_PATIENCE_S = 45.0


class SkippedRecords(RuntimeError):
    """Records of an internal partition stayed missing past GAP_PATIENCE_S: applying
    what follows them would lose them (the topics keep every record, so this is a fault,
    not retention at work)."""


def following_on(records: Sequence, start: int) -> tuple[list, int | None]:
    """The records from offset `start` on that follow one another without a missing
    offset, and the first missing offset when records past it were fetched (None when
    none were: the fetch ended where the run ends). Records before `start` are dropped:
    they are applied already."""
    run: list = []
    expected = start
    for rec in records:
        if rec.offset < expected:
            continue
        if rec.offset != expected:
            return run, expected
        run.append(rec)
        expected += 1
    return run, None


class Gaps:
    """The missing offset of each partition and since when it has been missing, so that
    a gap the broker fills is read again and one it never fills ends in SkippedRecords."""

    def __init__(self, patience_s: float = GAP_PATIENCE_S) -> None:
        self.patience_s = patience_s
        self.since: dict[object, tuple[int, float]] = {}

    def missing(self, partition: object, offset: int, now: float, what: str) -> None:
        """Note that `offset` of `partition` is missing as of `now` (a monotonic time);
        raise SkippedRecords once it has been missing for longer than the patience."""
        first, since = self.since.get(partition, (None, now))
        if first != offset:
            self.since[partition] = (offset, now)
            return
        if now - since > self.patience_s:
            raise SkippedRecords(f"{what}: offset {offset} has been missing for "
                                 f"{now - since:.0f} s while later records were fetched")

    def filled(self, partition: object) -> None:
        """The partition's records follow on again."""
        self.since.pop(partition, None)
