"""How many records the embedded runner's next batch, or a worker's next round on a doc
shard, may hold.

A batch's working memory grows with the earlier documents it re-scores, and each new page
reaches more of them as the state grows (a batch of a few hundred pages holds a few
thousand earlier documents early in a stream, four times as many later). So the runner
closes batches at fewer records when the last one held more slots than the budget gives
a batch (MemoryBudget.batch_slots), and at more again, by a quarter a batch at most, when
it held fewer - up to `--batch`. Fewer records a batch means an earlier document touched by
several pages is re-scored more often: the price of a budget that holds as the state
grows.

A worker applies the same rule to each doc shard's rounds (pages and deltas): it applies
the records that fit and sends its consumer back to the first one left, which the next
fetch brings again (adapters.worker).
"""

from __future__ import annotations

MIN_RECORDS = 16  # a batch this small re-scores too often to be worth closing sooner
GROWTH = 1.25  # the most a batch may grow over the last one's limit


class BatchSizer:
    """The records limit of the next batch, from what the last ones held."""

    def __init__(self, most: int, slots: int, floor: int = MIN_RECORDS) -> None:
        self.most, self.slots = most, slots
        self.floor = min(floor, most)
        self.records = most

    def observe(self, records: int, held_slots: int) -> int:
        """After a batch of `records` whose transaction held `held_slots` document slots:
        the next batch's limit, at the same slots a record."""
        if records > 0:
            fits = records * self.slots // max(1, held_slots)
            grown = int(self.records * GROWTH) + 1
            self.records = max(self.floor, min(self.most, fits, grown))
        return self.records
