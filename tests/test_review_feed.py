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
