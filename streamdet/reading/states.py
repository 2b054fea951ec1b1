"""Where a read finds its state: one `streamdet run` state, or the shards of worker
states (the newest copy of each), opened read-only for the commands that read them
(dump, explain, text, similar, phrases, sites) and the review desk."""

from __future__ import annotations

import os

from ..console import UsageError

DEFAULT_STATE = "streamdet-state"


def open_store(path: str, must_exist: bool = False, read_only: bool = False,
               tables: tuple[str, ...] | None = None, budget=None):
    from ..state.rocks import RocksKV
    from ..state.txn import Store

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
    from ..state.rocks import StateDirError

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
    from .views import shard_dirs

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
    from .views import all_shard_dirs

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
