"""loadtest/bench_bounds.py end to end at smoke size: every shape runs in its child at
each size and reports its figures (no timing is judged), and each shape's records are
what it says: the hostile repeats, sources and paths."""

from __future__ import annotations

import json

from loadtest import bench_bounds as bb


def test_smoke_run_reports_every_shape_at_every_size(tmp_path):
    out = tmp_path / "b.json"
    assert bb.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert set(r["shapes"]) == set(bb.SHAPES)
    for rows in r["shapes"].values():
        assert [row["n"] for row in rows] == list(bb.SMOKE_SIZES)
        for row in rows:
            assert row["engine_s"] > 0 and row["worst_step_s"] <= row["engine_s"]
            assert row["input_bytes"] > 0 and row["peak_rss_mb"] > 0
        assert "growth" in rows[1]


def test_shapes_are_the_hostile_inputs_they_name():
    records, batches = bb.one_sentence_pair(1000)
    assert len(records) == sum(batches) == 2
    assert records[0]["text"].count(bb._sentence(0)) == 1000
    records, batches = bb.many_sources(1200)
    assert len(records) == sum(batches) == 1 + len(range(0, 1190, 12))
    big = set(records[0]["text"].split())
    assert all(set(r["text"].split()) <= big for r in records[1:])
    records, batches = bb.tally_withdrawal(100)
    assert len(records) == sum(batches) == 106 and len({r["url"] for r in records}) == 55
    records, _ = bb.deep_path(1000)
    assert records[0]["url"].count("/") == 100 + 3
