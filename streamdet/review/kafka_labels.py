"""The review desk's labels on Kafka: every judgement and every draw is a record of one
labels topic, acknowledged by the brokers (acks=all) before the desk answers. The topic
has one partition, so its order is the order of judgements and a record's offset + 1 is
its id (a draw's name is `s<id>`).

The desk's agent folds the records into two GlobalTables that every instance holds
(kafka_desk.py: `labels`, URL -> its judgements; `draws`, name -> the draw), and this
class keeps their copies for the desk's threads: the desk folds a judgement at once (a
reviewer reloading the page sees it), and the table's change folds it again when it comes back,
which changes nothing (judgements are merged by id, never dropped)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace

from .labels import Label, LabelError


def label_record(label: Label) -> bytes:
    fields = asdict(label)
    fields.pop("id")
    return json.dumps({"record": "label", "label": fields}, sort_keys=True).encode()


def draw_record(urls: list[str], seed: int, params: dict, at: str) -> bytes:
    return json.dumps({"record": "draw", "draw": {"at": at, "seed": seed, "params": params,
                                                  "urls": urls}}, sort_keys=True).encode()


def parse_record(raw: bytes | None, offset: int) -> tuple[str, object] | None:
    """("label", Label) or ("draw", draw dict) of a labels topic record (None: the record
    is neither; a topic may hold anything, SPEC §9)."""
    try:
        obj = json.loads(raw or b"")
        if obj.get("record") == "label":
            fields = obj["label"]
            return "label", Label(**{k: fields[k] for k in fields
                                     if k in Label.__dataclass_fields__ and k != "id"},
                                  id=offset + 1)
        if obj.get("record") == "draw":
            d = obj["draw"]
            if not (isinstance(d.get("urls"), list) and isinstance(d.get("seed"), int)):
                return None
            return "draw", {"name": f"s{offset + 1}", "at": str(d.get("at", "")),
                            "seed": d["seed"], "params": d.get("params") or {},
                            "urls": [str(u) for u in d["urls"]]}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError, LabelError):
        return None
    return None


class KafkaLabels:
    """Labels written to the labels topic through `send` (which returns the record's
    offset once acknowledged), read from the tables' copies. `lock` is the desk's: the
    copies change on the event loop under it."""

    def __init__(self, send: Callable[[bytes], int], lock: threading.RLock) -> None:
        self._send = send
        self.lock = lock
        self._by_url: dict[str, dict[int, Label]] = {}
        self._newest: dict[str, Label] = {}
        self._draws: dict[str, dict] = {}

    # -- written by the desk ---------------------------------------------------------------

    def add(self, label: Label) -> Label:
        """Write a judgement; it is the desk's to `fold` (under its lock)."""
        return replace(label, id=self._send(label_record(label)) + 1)

    def add_draw(self, urls: list[str], seed: int, params: dict, at: str) -> str:
        name = f"s{self._send(draw_record(urls, seed, params, at)) + 1}"
        with self.lock:
            self._draws[name] = {"name": name, "at": at, "seed": seed, "params": params,
                                 "urls": list(urls)}
        return name

    # -- read by the desk (under its lock) -------------------------------------------------

    def newest(self) -> dict[str, Label]:
        return self._newest

    def current(self) -> Iterator[Label]:
        return iter(sorted(self._newest.values(), key=lambda lab: lab.id))

    def all(self) -> Iterator[Label]:
        every = (lab for kept in self._by_url.values() for lab in kept.values())
        return iter(sorted(every, key=lambda lab: lab.id))

    def history(self, url: str) -> list[Label]:
        return sorted((self._by_url.get(url) or {}).values(), key=lambda lab: lab.id)

    def draw(self, name: str) -> dict | None:
        found = self._draws.get(name)
        return None if found is None else {**found, "urls": list(found["urls"])}

    def draws(self) -> list[str]:
        return sorted(self._draws, key=lambda name: -int(name[1:]))

    def close(self) -> None:
        pass

    # -- the tables' changes (on the event loop, under the lock) ---------------------------

    def fold(self, label: Label) -> None:
        self._by_url.setdefault(label.url, {})[label.id] = label
        newest = self._newest.get(label.url)
        if newest is None or newest.id < label.id:
            self._newest[label.url] = label

    def fold_table(self, url: str, value: list | None) -> None:
        """The `labels` table's value of a URL: its judgements, as dicts."""
        for fields in value or ():
            try:
                self.fold(Label(**fields))
            except (TypeError, LabelError):
                continue

    def fold_draw(self, name: str, value: dict | None) -> None:
        if isinstance(value, dict) and isinstance(value.get("urls"), list):
            self._draws[name] = value
