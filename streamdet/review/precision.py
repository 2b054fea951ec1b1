"""Precision from the labels: Najork's Table 2 (seed 000), the share of judged quilts that
are spam, per parameter setting and per kind of page.

Only a uniform draw estimates precision without bias (Najork judged 100 pages drawn
uniformly a run); a reviewer browsing the list judges what caught the eye. So the report
counts the labels of sampled pages by default (`sampled=True`), and says how many others
there are. Unsure judgements are counted and left out of the share. The interval is
Wilson's 95% score interval, which stays inside [0, 1] for the small samples a desk
judges."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable

from .labels import Label

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's score interval for a proportion (None when nothing was judged)."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the ends, where
    hi = 1.0 if successes == n else min(1.0, centre + half)  # rounding would miss them
    return lo, hi


def _setting(params: dict) -> str:
    """A parameter setting as a key (the event's params, sorted)."""
    return json.dumps(params, sort_keys=True)


def precision_report(labels: Iterable[Label], sampled: bool = True) -> dict:
    """Per parameter setting, a row for all kinds of page then one per kind: judged
    pages, spam, not spam, unsure, the spam share of the decided ones and its interval;
    and how many labels were left out for not coming from a draw. `labels` are the
    newest judgement of each URL (LabelStore.current)."""
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(
        lambda: {"spam": 0, "not_spam": 0, "unsure": 0})
    left_out = 0
    for lab in labels:
        if sampled and not lab.sample:
            left_out += 1
            continue
        setting = _setting(lab.params)
        for kind in ("all", lab.kind or "unknown"):
            counts[setting, kind][lab.verdict] += 1
    rows = []
    for (setting, kind), c in sorted(counts.items(), key=lambda x: (x[0][0], x[0][1] != "all",
                                                                    x[0][1])):
        decided = c["spam"] + c["not_spam"]
        interval = wilson(c["spam"], decided)
        rows.append({"params": json.loads(setting), "kind": kind,
                     "judged": decided + c["unsure"], **c,
                     "spam_share": c["spam"] / decided if decided else None,
                     "interval95": list(interval) if interval else None})
    return {"sampled_only": sampled, "rows": rows, "left_out": left_out}
