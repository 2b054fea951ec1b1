"""Which shard owns what, when the pipeline runs as P doc shards and P gram shards.

- A URL belongs to doc shard hash(URL) mod P, so every version of a page (re-fetches)
  meets the same URL table, whatever partition the crawler wrote it to.
- A gram belongs to gram shard gram mod P (gram hashes are uniform 64-bit values); so
  do sentence keys and paragraph chunks' keys.
- A document version's docno is made from the offset of its record in its doc shard's
  input partition: docno = offset * P + shard + 1. Replaying that partition after a crash
  gives every version the same docno again, so re-sent messages are recognisable, and the
  shard of any docno is (docno - 1) mod P without a lookup.

The hashes are stable across processes and machines (mmh3, not Python's hash()).
"""

from __future__ import annotations

import mmh3
import numpy as np

from .chunks import Chunks


def url_shard(url: str, shards: int) -> int:
    return mmh3.hash64(url.encode("utf-8"), 0, signed=False)[0] % shards


def docno_for(offset: int, shard: int, shards: int) -> int:
    return offset * shards + shard + 1


def docno_shard(docno: int, shards: int) -> int:
    return (docno - 1) % shards


def split_grams(grams: np.ndarray, shards: int) -> list[np.ndarray]:
    """A sorted gram array cut into one sorted array per gram shard."""
    if shards == 1:
        return [grams]
    owner = grams % np.uint64(shards)
    return [grams[owner == s] for s in range(shards)]


def split_chunks(chunks: Chunks, shards: int) -> list[Chunks]:
    """A page's chunks cut into one part per gram shard, by key as grams are."""
    if shards == 1:
        return [chunks]
    owner = chunks.keys % np.uint64(shards)
    return [chunks.part(owner == s) for s in range(shards)]


def split_rows(rows: np.ndarray, shards: int) -> list[np.ndarray]:
    """Sentence rows (key, position, start, end) cut into one array per gram shard, by
    key as grams are: a key's postings live with the grams of the same shard."""
    if shards == 1:
        return [rows]
    owner = rows[:, 0] % np.uint64(shards)
    return [rows[owner == s] for s in range(shards)]
