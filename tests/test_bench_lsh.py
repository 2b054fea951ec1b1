"""loadtest/bench_lsh.py end to end at its smoke size: both contenders see every page, and
the result carries what the report and the README quote (no timing is judged)."""

from __future__ import annotations

import json

from loadtest import bench_lsh


def test_smoke_run_measures_both_on_the_same_pages(tmp_path):
    out = tmp_path / "lsh.json"
    assert bench_lsh.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    sd, ls, f = r["streamdet"], r["lsh"], r["figures"]
    assert r["truth"]["records"] == bench_lsh.SMOKE_PAGES == sd["pages"] == ls["pages"]
    assert f["ratio"] > 0 and f["ratio_cpu"] > 0
    # streamdet's run takes at least its engine thread's CPU: the ratio stays within that
    assert sd["cpu_parts_seconds"]["main thread"] > 0
    assert f["ratio"] <= f["ceiling_main_thread"] and f["ratio"] <= f["ceiling_cores"]
    assert set(ls["split"]) == {"parse_tokenize", "minhash", "lsh_query_insert"}
    assert [q["threshold"] for q in ls["quality"]] == list(bench_lsh.THRESHOLDS)
    at_default = next(q for q in ls["quality"] if q["threshold"] == bench_lsh.THRESHOLD)
    # resemblance finds the near-duplicates; streamdet finds the quilts (Najork's point)
    assert at_default["mirrors_with_original"] > 0.5
    assert sd["quality"]["quilts_flagged"] > at_default["quilts_with_a_donor"]
    assert 0 < ls["quilt_donor_jaccard"] < 0.2
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
