"""The alerter's SQLite file: its source, the file position, the highest seq alerted per URL.

SQLite gives one atomic, durable transaction for the seqs and the position without
rewriting a growing file after each alert. The file is locked by one alerter at a time and
bound to its source (another file or topic is refused)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable

from ..adapters.outputs import utc_now
from .config import AlertsError

STATE_FORMAT = "alerts-1"


class Position:
    """Opened with an exclusive lock held until close (one alerter per state)."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        if os.path.isdir(path):
            raise AlertsError(f"state file {path} is a directory")
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.db = sqlite3.connect(path, timeout=0, isolation_level=None,
                                      check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise AlertsError(f"cannot open state file {path}: {exc}") from None
        meta = self._open(source)
        self._check(meta, source)
        self.position = int(meta["position"])
        self.alerted: dict[str, int] = dict(self.db.execute("SELECT url, seq FROM alerted"))

    def _open(self, source: str) -> dict[str, str]:
        """Take the lock, create the tables of a new file; the meta rows."""
        try:
            self.db.execute("PRAGMA locking_mode=EXCLUSIVE")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("BEGIN IMMEDIATE")  # takes the lock now, keeps it (EXCLUSIVE)
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self.db.execute("CREATE TABLE IF NOT EXISTS alerted (url TEXT PRIMARY KEY, "
                            "seq INTEGER NOT NULL, at TEXT NOT NULL)")
            meta = dict(self.db.execute("SELECT key, value FROM meta"))
            if not meta:
                meta = {"format": STATE_FORMAT, "source": source, "position": "0"}
                self.db.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))
            # A write, so that the exclusive lock is taken now and kept until close.
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('opened', ?)", (utc_now(),))
            self.db.execute("COMMIT")
            return meta
        except sqlite3.OperationalError as exc:
            self.db.close()
            if "locked" in str(exc):
                raise AlertsError(f"state file {self.path} is in use by another streamdet "
                                  "alerts") from None
            raise AlertsError(f"state file {self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise AlertsError(f"{self.path} is not a streamdet alerts state file ({exc})"
                              ) from None

    def _check(self, meta: dict[str, str], source: str) -> None:
        if meta.get("format") != STATE_FORMAT:
            self.db.close()
            raise AlertsError(f"{self.path} is not a streamdet alerts state file "
                              f"(format {meta.get('format')!r})")
        if meta["source"] != source:
            self.db.close()
            raise AlertsError(f"state file {self.path} belongs to {meta['source']}, not "
                              f"{source}; use --state-file to give this source a state of its own")

    def save(self, position: int | None, alerted: Iterable[tuple[str, int]]) -> None:
        """One durable transaction: the seqs alerted, then (file mode) the position."""
        now = utc_now()
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO alerted (url, seq, at) VALUES (?, ?, ?) "
                           "ON CONFLICT(url) DO UPDATE SET seq = max(seq, excluded.seq), "
                           "at = excluded.at", [(u, s, now) for u, s in alerted])
            if position is not None:
                db.execute("UPDATE meta SET value = ? WHERE key = 'position'", (str(position),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if position is not None:
            self.position = position

    def close(self) -> None:
        self.db.close()
