"""What an alerter run did, and the one-line summary the command prints at its end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Stats:
    events: int = 0  # lines / records read
    candidates: int = 0  # quilt (and rescore) events
    repeats: int = 0  # candidates not alerted: an equal or higher seq was alerted or pending
    below: int = 0  # quilt (and rescore) events whose spam_score is below --min-score
    malformed: int = 0
    alerts: int = 0  # delivered
    pages: int = 0  # pages in delivered alerts
    dead: int = 0  # alerts dead-lettered
    dead_pages: int = 0
    retries: int = 0
    position: Any = None  # last committed position (file: byte offset; Kafka: {partition: offset})

    def summary(self, dead_letter_path: str) -> str:
        parts = [f"{self.events} events read", f"{self.candidates} quilts"
                 + (f" ({self.repeats} already alerted or pending)" if self.repeats else ""),
                 f"{self.alerts} alerts delivered for {self.pages} pages"]
        if self.below:
            parts.insert(2, f"{self.below} below --min-score")
        if self.retries:
            parts.append(f"{self.retries} retries")
        if self.dead:
            parts.append(f"{self.dead} alerts ({self.dead_pages} pages) dead-lettered -> "
                         f"{dead_letter_path}")
        if self.malformed:
            parts.append(f"{self.malformed} malformed events skipped")
        parts.append(f"position {self.position}")
        return "streamdet: alerts: " + "; ".join(parts)
