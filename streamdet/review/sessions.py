"""Browser sessions the desk can end.

A signed cookie alone cannot be taken back: one copied before a logout would read and
write until it expired. So the cookie holds a random session id only, and the session
itself (who, its CSRF token, the credential it was opened with, when it began and was
last used) is kept here, in `sessions.sqlite` in the desk directory (mode 0600), so that
a restart keeps everyone logged in. A session ends when its reviewer logs out, after
IDLE_S without a request or LONGEST_S in all, and when the credential it was opened with
changes: the token, or that reviewer's password (`streamdet review passwd`), which the
web layer checks on every request against the tag kept here (auth.Credentials.tag).

On Kafka each desk instance keeps its own sessions: a browser stays with the instance it
logged in to (the docs say to route by cookie).
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .label_store import private_file

IDLE_S = 30 * 60  # a desk left open and unattended: log in again
LONGEST_S = 12 * 3600  # a working day, then log in again
TOUCH_S = 60  # `seen` is written at most this often (not once a request)


@dataclass(frozen=True)
class Session:
    sid: str
    who: str
    csrf: str
    credential: str  # auth.Credentials.tag(who) when it began
    began: float
    seen: float


class SessionStore:
    """Sessions in SQLite (`path`; ":memory:" keeps them in this process only)."""

    def __init__(self, path: str = ":memory:", clock: Callable[[], float] = time.time,
                 idle_s: float = IDLE_S, longest_s: float = LONGEST_S) -> None:
        self.clock, self.idle_s, self.longest_s = clock, idle_s, longest_s
        self._lock = threading.Lock()
        if path != ":memory:":
            private_file(path)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS sessions (sid TEXT PRIMARY KEY, "
                        "who TEXT NOT NULL, csrf TEXT NOT NULL, credential TEXT NOT NULL, "
                        "began REAL NOT NULL, seen REAL NOT NULL)")

    def begin(self, who: str, credential: str) -> Session:
        """A new session (a login): a fresh id and CSRF token. The sessions that ended by
        time go first: one never used again would otherwise stay (`get` removes an
        ended session only when its cookie comes back)."""
        self.sweep()
        now = self.clock()
        session = Session(secrets.token_urlsafe(32), who, secrets.token_urlsafe(24),
                          credential, now, now)
        with self._lock:
            self.db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)",
                            (session.sid, who, session.csrf, credential, now, now))
        return session

    def get(self, sid: object) -> Session | None:
        """The live session of that id (None: no such session, or it has ended: it is
        then removed). Marks it used."""
        if not isinstance(sid, str) or not sid:
            return None
        now = self.clock()
        with self._lock:
            row = self.db.execute("SELECT * FROM sessions WHERE sid = ?", (sid,)).fetchone()
            if row is None:
                return None
            session = Session(*row)
            if now - session.seen > self.idle_s or now - session.began > self.longest_s:
                self.db.execute("DELETE FROM sessions WHERE sid = ?", (sid,))
                return None
            if now - session.seen >= TOUCH_S:
                self.db.execute("UPDATE sessions SET seen = ? WHERE sid = ?", (now, sid))
        return session

    def end(self, sid: object) -> None:
        """End one session (a logout, or a credential that changed)."""
        if isinstance(sid, str):
            with self._lock:
                self.db.execute("DELETE FROM sessions WHERE sid = ?", (sid,))

    def sweep(self) -> int:
        """Remove the sessions that have ended by time; how many."""
        now = self.clock()
        with self._lock:
            return self.db.execute("DELETE FROM sessions WHERE seen < ? OR began < ?",
                                   (now - self.idle_s, now - self.longest_s)).rowcount

    def close(self) -> None:
        self.db.close()
