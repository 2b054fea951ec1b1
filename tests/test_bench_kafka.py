"""loadtest/bench_kafka.py: the records its sender reads back from a stream's half."""

from __future__ import annotations

import json

from loadtest.bench_kafka import raw_records


def test_raw_records_are_the_lines_bytes_as_written(tmp_path):
    """Each record is its line's bytes, unchanged (no re-encoding; U+2028 and non-ASCII
    text stay raw inside strings), blank lines skipped, a last line without b"\\n" kept."""
    pages = [{"url": "http://a.example/1", "html": "caf\u00e9 \u2028 line\u2029 \U0001f600"},
             {"url": "http://b.example/2", "html": "<p>x\r</p>"}]
    lines = [json.dumps(p, ensure_ascii=False).encode("utf-8") for p in pages]
    path = tmp_path / "segment.jsonl"
    path.write_bytes(lines[0] + b"\n\n" + lines[1])
    assert raw_records(path) == [(p["url"], raw) for p, raw in zip(pages, lines, strict=True)]
