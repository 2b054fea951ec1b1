"""loadtest/profile_shards.py: each shard's engine time on a paced pipeline, and its table."""

from __future__ import annotations

import json
from pathlib import Path

from loadtest import profile_shards as ps


def test_a_smoke_run_times_every_shard_and_the_site_work_within_the_site_shard(
        capsys, monkeypatch, tmp_path: Path):
    monkeypatch.setattr(ps, "OUT", tmp_path)
    assert ps.main(["--smoke"]) == 0
    res = json.loads(next(tmp_path.glob("profile_shards-60p-*.json")).read_text())
    assert res["smoke"] and res["warm"] == 30 and len(res["windows"]) == 3
    shards = {f"{k}{i}" for k in "dg" for i in range(4)}
    assert all(shards <= set(w) for w in res["windows"])
    ms = res["ms_a_page"]
    assert all(ms[s] > 0 for s in shards)
    assert 0 < ms[ps.SITE] < ms["d0"]  # the site work is a part of doc shard 0's steps
    out = capsys.readouterr().out
    assert "| doc shard 0 |" in out and "The site shard:" in out and "range assignor" in out


def test_the_table_compares_the_site_shard_and_two_workers_loads():
    res = {"pages": 200, "warm": 100, "shards": 4,
           "ms_a_page": {"d0": 9.0, "d1": 4.0, "d2": 5.0, "d3": 6.0, "g0": 6.0, "g1": 5.0,
                         "g2": 5.0, "g3": 5.0, ps.SITE: 4.5}}
    text = ps.summary(res)
    assert "| doc shard 0 | 9.0 |" in text and "| gram shard 3 | 5.0 |" in text
    assert "(doc shard 0) | 4.5 |" in text
    assert "1.80x the mean of the other doc shards" in text
    assert "24.0 and 21.0 ms a page (1.14x)" in text
