"""Zhang's sequence matching (SPEC §7): the maximal diagonals of equal sentences between
two documents.

The match matrix of d and d' has a cell (i, j) where sentence i of d and sentence j of d'
have the same, non-common key. A diagonal is a maximal run (i, j), (i+1, j+1), ... of
cells; one of at least gamma cells makes d and d' partial duplicates, and is reported
with its span in both texts and its length. The cells are found by one sorted lookup of
d's keys among the partner's rows (which hold only shared, non-common keys: the
sentence-key role's links), and the runs by sorting the cells by (i - j, i).

The cells are bounded by construction (SPEC §9): a key is on at most m positions of each
page that posts it (engine.sentences: runs of repeats are one sentence, and a key on more
than m positions is NO_KEY, never posted nor linked), so a pair has at most
m · min(|own|, |rows|) cells, never copy against copy.
"""

from __future__ import annotations

import numpy as np

from .sentences import Sentences

Diagonal = dict  # {"spans": [s, e], "other_spans": [s, e], "sentences": n}


def cells(own: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, row index) of every cell: own[i] equals the key of that partner row."""
    order = np.argsort(rows[:, 0], kind="stable")
    keys = rows[order, 0]
    lo = np.searchsorted(keys, own, "left")
    hi = np.searchsorted(keys, own, "right")
    count = hi - lo
    total = int(count.sum())
    i = np.repeat(np.arange(len(own)), count)
    skip = np.repeat(lo - (np.cumsum(count) - count), count)
    return i, order[skip + np.arange(total)]


def diagonals(own: Sentences, rows: np.ndarray, gamma: int) -> list[Diagonal]:
    """The maximal diagonals of at least `gamma` sentences between a document (`own`) and
    a partner given by its rows (key, position, start, end) of shared, non-common keys,
    sorted by their start in each document."""
    if len(rows) < gamma or len(own) < gamma:
        return []
    i, r = cells(own.keys, rows)
    if len(i) < gamma:
        return []
    j = rows[r, 1].astype(np.int64)
    d = i - j
    order = np.lexsort((i, d))
    i, j, d, r = i[order], j[order], d[order], r[order]
    new = np.ones(len(i), dtype=bool)
    new[1:] = (d[1:] != d[:-1]) | (i[1:] != i[:-1] + 1)
    first = np.flatnonzero(new)
    length = np.diff(np.append(first, len(i)))
    keep = length >= gamma
    first, length = first[keep], length[keep]
    out = []
    for f, n in sorted(zip(first.tolist(), length.tolist(), strict=True),
                       key=lambda x: (int(i[x[0]]), int(j[x[0]]))):
        last = f + n - 1
        out.append({"spans": [int(own.starts[i[f]]), int(own.ends[i[last]])],
                    "other_spans": [int(rows[r[f], 2]), int(rows[r[last], 3])],
                    "sentences": int(n)})
    return out


def paired(own: Sentences, partners: dict[int, np.ndarray], gamma: int) -> list[int]:
    """The partners (of `partners`: docno -> its rows, as `diagonals` takes them) that
    have a diagonal of at least `gamma` sentences with `own`, in the order given: which of
    them are partial duplicates of the document, without their diagonals. One sorted
    lookup and one sort for all partners together, where `diagonals` takes them one by
    one: a reader that needs only who is paired with whom (the spam ranking) pays a few
    array operations a document, not a few a pair."""
    ids = [p for p, rows in partners.items() if len(rows) >= gamma]
    if len(own) < gamma or not ids:
        return []
    rows = np.concatenate([partners[p] for p in ids])
    i, r = cells(own.keys, rows)
    if len(i) < gamma:
        return []
    who = np.repeat(np.arange(len(ids)), [len(partners[p]) for p in ids])[r]
    d = i - rows[r, 1].astype(np.int64)
    order = np.lexsort((i, d, who))
    i, d, who = i[order], d[order], who[order]
    new = np.ones(len(i), dtype=bool)
    new[1:] = (who[1:] != who[:-1]) | (d[1:] != d[:-1]) | (i[1:] != i[:-1] + 1)
    first = np.flatnonzero(new)
    length = np.diff(np.append(first, len(i)))
    found = set(who[first[length >= gamma]].tolist())
    return [p for k, p in enumerate(ids) if k in found]
