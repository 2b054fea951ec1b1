"""The review desk's labels in embedded mode: a SQLite file beside the state.

Every judgement is a row, committed with `synchronous=FULL` before the desk answers, so a
restart or a kill -9 loses none that was acknowledged; a later judgement of a URL
supersedes the earlier one for lists and precision, and both stay for the export."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
from collections.abc import Iterable, Iterator
from dataclasses import replace

from .labels import Label, LabelError

FORMAT = "review-labels-1"
_COLUMNS = "id, url, verdict, note, who, at, params, kind, sample"


def private_dir(path: str) -> None:
    """A directory only its owner may enter (0700), made so or made private: a desk's
    files name reviewers and what they judged."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    _owner_only(path, 0o700)


def private_file(path: str) -> None:
    """A desk's SQLite file (labels, sessions) readable by its owner only (0600), made so
    before SQLite opens it: SQLite gives its -wal and -shm files the database file's
    mode. A file an older version left readable to all is made private, with those."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for name in (path, path + "-wal", path + "-shm"):
        _owner_only(name, 0o600)


def _owner_only(path: str, most: int) -> None:
    """Take the group's and others' bits off `path` (keeping those of `most`), if it is
    there and ours: one another user owns is left as it is."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == os.getuid() and mode & 0o077:
        os.chmod(path, mode & most)


class LabelStoreError(RuntimeError):
    """The labels file cannot be opened or is not one."""


class LabelStore:
    """Labels in a SQLite file; one writer process at a time (SQLite's own lock). The
    desk writes outside its lock: `_write` keeps a write and the id it reads together."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._write = threading.Lock()
        self._newest: dict[str, Label] | None = None
        try:
            private_dir(os.path.dirname(os.path.abspath(path)))
            private_file(path)
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self._create()
        except sqlite3.DatabaseError as exc:
            raise LabelStoreError(f"{path} is not a streamdet review labels file ({exc})"
                                  ) from None
        except OSError as exc:
            raise LabelStoreError(f"cannot open labels file {path}: {exc}") from None

    def _create(self) -> None:
        db = self.db
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS labels (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                   "url TEXT NOT NULL, verdict TEXT NOT NULL, note TEXT NOT NULL, "
                   "who TEXT NOT NULL, at TEXT NOT NULL, params TEXT NOT NULL, "
                   "kind TEXT NOT NULL, sample TEXT NOT NULL)")
        db.execute("CREATE INDEX IF NOT EXISTS labels_url ON labels (url, id)")
        db.execute("CREATE TABLE IF NOT EXISTS draws (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                   "at TEXT NOT NULL, seed INTEGER NOT NULL, params TEXT NOT NULL, "
                   "urls TEXT NOT NULL)")
        db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
        found = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0]
        if found != FORMAT:
            raise LabelStoreError(f"{self.path} is a labels file of format {found!r}, not "
                                  f"{FORMAT!r}")

    def add(self, label: Label) -> Label:
        """Record a judgement durably; the label with its id."""
        with self._write:
            cur = self.db.execute(
                f"INSERT INTO labels ({_COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?)",
                (label.url, label.verdict, label.note, label.who, label.at,
                 json.dumps(label.params, sort_keys=True), label.kind, label.sample))
            return replace(label, id=cur.lastrowid)

    def latest(self, urls: Iterable[str]) -> dict[str, Label]:
        """Each URL's newest judgement (URLs never judged are left out)."""
        urls = list(dict.fromkeys(urls))
        out: dict[str, Label] = {}
        for i in range(0, len(urls), 500):  # SQLite's bound on parameters
            chunk = urls[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT {_COLUMNS} FROM labels WHERE id IN (SELECT MAX(id) FROM labels "
                f"WHERE url IN ({marks}) GROUP BY url)", chunk)
            out.update((lab.url, lab) for lab in map(_label, rows))
        return out

    def newest(self) -> dict[str, Label]:
        """Each judged URL's newest judgement, kept up to date by `fold` (the desk filters
        lists by label state without reading the file)."""
        if self._newest is None:
            self._newest = {lab.url: lab for lab in self.current()}
        return self._newest

    def fold(self, label: Label) -> None:
        """Make a recorded judgement its URL's newest (the desk calls it under its lock)."""
        newest = self.newest()
        if label.url not in newest or newest[label.url].id < label.id:
            newest[label.url] = label

    def history(self, url: str) -> list[Label]:
        """Every judgement of a URL, oldest first."""
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM labels WHERE url = ? ORDER BY id",
                               (url,))
        return [_label(r) for r in rows]

    def current(self) -> Iterator[Label]:
        """The newest judgement of every judged URL (what precision counts)."""
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM labels WHERE id IN "
                               "(SELECT MAX(id) FROM labels GROUP BY url) ORDER BY id")
        return map(_label, rows)

    def all(self) -> Iterator[Label]:
        """Every judgement ever recorded, oldest first (the export)."""
        return map(_label, self.db.execute(f"SELECT {_COLUMNS} FROM labels ORDER BY id"))

    def add_draw(self, urls: list[str], seed: int, params: dict, at: str) -> str:
        """Keep a uniform draw (sampling.draw) of quilts to judge; its name (`s<id>`),
        which the labels judged from it carry."""
        with self._write:
            cur = self.db.execute("INSERT INTO draws VALUES (NULL, ?, ?, ?, ?)",
                                  (at, seed, json.dumps(params, sort_keys=True),
                                   json.dumps(urls)))
            return f"s{cur.lastrowid}"

    def draw(self, name: str) -> dict | None:
        """A kept draw: {"name", "at", "seed", "params", "urls"} (None: no such draw)."""
        if not name.startswith("s") or not name[1:].isdigit():
            return None
        row = self.db.execute("SELECT at, seed, params, urls FROM draws WHERE id = ?",
                              (int(name[1:]),)).fetchone()
        if row is None:
            return None
        at, seed, params, urls = row
        return {"name": name, "at": at, "seed": seed, "params": json.loads(params),
                "urls": json.loads(urls)}

    def draws(self) -> list[str]:
        """The names of the kept draws, newest first."""
        return [f"s{i}" for (i,) in self.db.execute("SELECT id FROM draws ORDER BY id DESC")]

    def close(self) -> None:
        self.db.close()


def _label(row: tuple) -> Label:
    id_, url, verdict, note, who, at, params, kind, sample = row
    try:
        return Label(url, verdict, who, at, note, json.loads(params), kind, sample, id_)
    except (LabelError, ValueError) as exc:
        raise LabelStoreError(f"a stored label cannot be read back: {exc}") from None
