"""Where a read finds its state: one `streamdet run` state, or the shards of worker
states (the newest copy of each), opened read-only for the commands that read them
(dump, explain, text, similar, phrases, sites) and the review desk."""

from __future__ import annotations

import os

from ..console import UsageError
from ..state.rocks import RocksKV, StateDirError
from ..state.txn import Store

DEFAULT_STATE = "streamdet-state"


def open_store(path: str, must_exist: bool = False, read_only: bool = False,
               tables: tuple[str, ...] | None = None, budget=None):
    if must_exist:
        if not os.path.exists(path):
            raise UsageError(f"no streamdet state in {path}: no such directory")
        if not os.path.isdir(path):
            raise UsageError(f"no streamdet state in {path}: not a directory")
        if not os.path.exists(os.path.join(path, "CURRENT")):
            raise UsageError(f"no streamdet state in {path} (made by `streamdet run --state`)")
    elif os.path.exists(path):
        if not os.path.isdir(path):
            raise UsageError(f"state directory {path} is a file, not a directory")
        if not os.path.exists(os.path.join(path, "CURRENT")):
            other = [n for n in os.listdir(path) if not n.startswith("dead-letter")]
            if other:
                raise UsageError(f"{path} is not empty and holds no streamdet state "
                                 f"(e.g. {sorted(other)[0]}); give a new directory as --state")
    try:
        store = Store(RocksKV(path, read_only=read_only, tables=tables, budget=budget))
    except StateDirError as exc:
        if "lock" in str(exc).lower():
            raise UsageError(f"state {path} is in use by another streamdet process") from None
        raise
    if must_exist and store.meta("params") is None:
        store.close()
        raise UsageError(f"no streamdet state in {path}: a database without streamdet "
                         "parameters (an interrupted first run, or not a streamdet state)")
    return store


def state_dirs(states: list[str] | None, partial: bool = True
                ) -> tuple[list[str], str | None]:
    """The directories to read: one `streamdet run` state, or the doc shards of worker
    states (the newest copy of each), and the directory of the clusters (SPEC §6): the
    state itself, or the worker states' cluster shard (None: none of them holds it).
    Unless `partial`, every doc shard of the pipeline and its cluster shard."""
    states = states or [DEFAULT_STATE]
    found = shard_dirs(states)  # worker states: their doc shards, newest copy of each
    if found is None:
        if len(states) > 1:
            raise UsageError("several --state directories are only for worker states")
        return states, states[0]
    dirs, missing, near = found
    if (missing or near is None) and not partial:
        lacks = [f"doc shards {', '.join(map(str, missing))}"] if missing else []
        lacks += [] if near is not None else ["the cluster shard (gram shard 0)"]
        raise UsageError(
            f"these worker states lack {' and '.join(lacks)} of the pipeline: give the "
            "--state of every worker, or --partial for what these hold")
    return dirs, near


def cluster_store(dirs: list[str], near: str | None):
    """The store to read clusters from: None for a `streamdet run` state (its own) or a
    missing cluster shard (the rows then say null), else the cluster shard opened."""
    if near is None or dirs == [near]:
        return None
    return open_store(near, must_exist=True, read_only=True)


def opened_states(states: list[str] | None, stack, tables: tuple[str, ...] | None = None):
    """A `run` state opened read-only, or every shard of worker states: (doc shards,
    gram shards, shard count), the stores by shard number; `stack` closes them. With
    `tables`, only those tables are opened (a command that reads no other)."""
    states = states or [DEFAULT_STATE]
    try:
        found = all_shard_dirs(states)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if found is None and len(states) > 1:
        raise UsageError("several --state directories are only for worker states")

    def opened(path: str):
        store = open_store(path, must_exist=True, read_only=True, tables=tables)
        stack.callback(store.close)
        return store

    if found is None:
        return opened(states[0])
    doc_dirs, gram_dirs, shards = found
    return ({s: opened(p) for s, p in doc_dirs.items()},
            {g: opened(p) for g, p in gram_dirs.items()}, shards)


def _newest_copies(states: list[str], kind: str) -> tuple[dict[int, str], int, bool]:
    """The directories of worker states' `kind` shards (STATE/<kind>-<s>), one per shard
    (where a shard moved between workers, the copy that has applied the most); the
    pipeline's shard count; whether any was found."""
    best: dict[int, tuple[int, str]] = {}
    shards = 0
    found = False
    for state in states:
        if not os.path.isdir(state):
            continue
        for name in sorted(os.listdir(state)):
            index = name[len(kind) + 1 :]
            if not name.startswith(kind + "-") or not index.isdigit():
                continue
            found = True
            path = os.path.join(state, name)
            store = Store(RocksKV(path, read_only=True))
            try:
                applied = sum(store.positions().values())
                shards = max(shards, int(store.meta("shards") or 0))
            finally:
                store.close()
            s = int(index)
            if s not in best or applied > best[s][0]:
                best[s] = (applied, path)
    return {s: path for s, (_, path) in best.items()}, shards, found


def worker_shards(states: list[str]) -> tuple[dict[int, str], dict[int, str], int] | None:
    """The doc and gram shard directories of worker states (the newest copy of each) and
    the pipeline's shard count; None when they are not worker states."""
    docs, shards, found = _newest_copies(states, "doc")
    if not found:
        return None
    grams, _, _ = _newest_copies(states, "gram")
    return docs, grams, shards


def all_shard_dirs(states: list[str]) -> tuple[dict[int, str], dict[int, str], int] | None:
    """Every doc and gram shard directory of worker states (the newest copy of each) and
    the shard count; None when they are not worker states. Raises ValueError naming the
    shards none of them holds."""
    found = worker_shards(states)
    if found is None:
        return None
    docs, grams, shards = found
    lacks = [f"doc-{s}" for s in range(shards) if s not in docs]
    lacks += [f"gram-{g}" for g in range(shards) if g not in grams]
    if lacks:
        raise ValueError(f"these worker states lack shards {', '.join(lacks)} of the "
                         "pipeline: give the --state of every worker")
    return found


def shard_dirs(states: list[str]) -> tuple[list[str], list[int], str | None] | None:
    """The doc-shard directories of worker states (STATE/doc-<s>), one per shard (the
    newest copy of each), the doc shards of the pipeline that none of them holds, and
    the cluster shard's directory (gram shard 0: SPEC §6's clusters; None if none of
    them holds it). None when the directories are not worker states."""
    from ..engine.shards import CLUSTER_SHARD  # the engine's shards: ~80 ms, not for --help

    found = worker_shards(states)
    if found is None:
        return None
    docs, grams, shards = found
    missing = [s for s in range(shards) if s not in docs]
    return [docs[s] for s in sorted(docs)], missing, grams.get(CLUSTER_SHARD)
