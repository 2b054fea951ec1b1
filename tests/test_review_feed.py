"""The embedded desk follows a run's events file: whole lines only, as they are appended,
a replaced file read again from its start, lines that are not events passed over; the view
equals the projection of every event in the file (a real run's, and random appends)."""

from __future__ import annotations

import json

from streamdet.review.event_feed import EventFeed
from streamdet.review.projection import View, apply

from .cli_helpers import streamdet, write_jsonl


def _view(events: list[dict]) -> View:
    view = View()
    for ev in events:
        apply(view, ev)
    return view


def test_a_feed_folds_whole_lines_as_they_come(tmp_path):
    path = tmp_path / "events.jsonl"
    feed = EventFeed(str(path))
    assert feed.poll() == 0  # no file yet
    evs = [{"event": "quilt", "url": f"http://a.example/{i}", "seq": i, "quilted": True,
            "sources": [], "note": "x" * (i * 300)} for i in range(1, 40)]
    lines = [json.dumps(e).encode() + b"\n" for e in evs]
    blob = b"".join(lines[:10]) + b"not json\n[1, 2]\n" + lines[10][:25]  # a line half written
    path.write_bytes(blob)
    assert feed.poll() == 10 and feed.skipped == 2
    with open(path, "ab") as f:
        f.write(lines[10][25:] + b"".join(lines[11:]))
    assert feed.poll() == 29 and feed.poll() == 0
    assert feed.view == _view(evs) and feed.events == 39
    path.write_bytes(b"".join(lines[:3]))  # replaced by a shorter file
    assert feed.poll() == 3 and feed.view == _view(evs[:3])


def test_a_feed_of_a_real_run_equals_its_projection(tmp_path):
    words = [[f"s{i}w{j}" for j in range(40)] for i in range(5)]
    records = [{"url": f"http://s{i}.example/p", "text": " ".join(w)}
               for i, w in enumerate(words)]  # sources on domains of their own
    records.append({"url": "http://q.example/quilt", "text": " ".join(
        x for w in words for x in w[5:20])})  # 15 words of each: a quilt of 5
    write_jsonl(tmp_path / "in.jsonl", records)
    events = tmp_path / "events.jsonl"
    done = streamdet("run", "--input", str(tmp_path / "in.jsonl"), "--state",
                     str(tmp_path / "state"), "--events", str(events), "-k", "3")
    assert done.returncode == 0, done.stderr
    written = [json.loads(x) for x in events.read_text().splitlines()]
    assert any(e["event"] == "quilt" for e in written)
    feed = EventFeed(str(events))
    assert feed.poll() == len(written) and feed.view == _view(written)
    assert set(feed.view.quilts) == {e["url"] for e in written if e["event"] in (
        "quilt", "rescore", "unquilt")}


def test_a_line_too_long_to_be_an_event_is_passed_over_unread(tmp_path, monkeypatch):
    """SPEC §9: a line past LINE_LIMIT is counted and passed over without holding it in
    memory whole; the events around it are folded."""
    from streamdet.review import event_feed

    monkeypatch.setattr(event_feed, "READ_CHUNK", 64)
    monkeypatch.setattr(event_feed, "LINE_LIMIT", 256)
    path = tmp_path / "events.jsonl"
    ev = [{"event": "quilt", "url": f"http://a.example/{i}", "seq": 1, "sources": []}
          for i in range(2)]
    huge = b'{"event": "quilt", "note": "' + b"x" * 5000 + b'"}\n'
    path.write_bytes(json.dumps(ev[0]).encode() + b"\n" + huge[:3000])
    feed = EventFeed(str(path))
    assert feed.poll() == 1 and feed.skipped == 0  # the long line is still being written
    with open(path, "ab") as f:
        f.write(huge[3000:] + json.dumps(ev[1]).encode() + b"\n")
    assert feed.poll() == 1 and feed.skipped == 1
    assert feed.view == _view(ev) and feed.offset == path.stat().st_size
