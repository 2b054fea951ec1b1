"""Uniform draws of quilts to judge, as Najork drew 100 pages a run (seed 000 §5): the
precision a desk reports is only an estimate if the pages judged were drawn without
regard to anything a reviewer sees."""

from __future__ import annotations

import random
from collections.abc import Sequence


def draw(quilts: Sequence[str], n: int, seed: int) -> list[str]:
    """n URLs drawn uniformly without replacement from `quilts` (all of them when there
    are fewer), the same for the same seed and candidates in any order."""
    if n < 1:
        raise ValueError("a draw needs n >= 1")
    pool = sorted(set(quilts))
    return random.Random(seed).sample(pool, min(n, len(pool)))
