"""A small `streamdet run` state for the review desk's tests: five sources and a quilt
of their words whose text and URL hold HTML (`<script>`), source 0 giving it two
separate passages."""

from __future__ import annotations

import json
from pathlib import Path

from .cli_helpers import streamdet, write_jsonl

QUILT = 'http://q.example/quilt?q=<script>alert("u")</script>'
TOKEN = "t0ken-for-the-review-desk-tests"


def planted_state(tmp: Path) -> tuple[Path, Path, dict]:
    """(state, events file, the quilt's event)."""
    words = [[f"s{i}w{j}" for j in range(60)] for i in range(5)]
    records = [{"url": f"http://s{i}.example/p", "text": " ".join(w)}
               for i, w in enumerate(words)]
    taken = [" ".join(w[5 + i : 20 + i]) for i, w in enumerate(words)]
    taken.append(" ".join(words[0][40:52]))  # source 0's second passage
    records.append({"url": QUILT, "text": " <script>alert(1)</script> ".join(taken)})
    records.append({"url": "http://plain.example/", "text": "nothing copied here at all"})
    write_jsonl(tmp / "in.jsonl", records)
    state, events = tmp / "state", tmp / "events.jsonl"
    streamdet("run", "--input", tmp / "in.jsonl", "--state", state, "--events", events,
              "-k", "3")
    [quilt] = [e for e in map(json.loads, events.read_text().splitlines())
               if e["event"] == "quilt"]
    assert quilt["url"] == QUILT and [len(s["spans"]) for s in quilt["sources"]][0] == 2
    return state, events, quilt
