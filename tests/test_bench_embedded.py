"""loadtest/bench_embedded.py end to end at its smoke size: the result carries the figures
the report and docs/benchmarks quote, and its bounds are consistent with what was measured
(no timing is judged)."""

from __future__ import annotations

import json

from loadtest import bench_embedded


def test_smoke_run_reports_the_ratio_within_its_ceilings(tmp_path):
    out = tmp_path / "embedded.json"
    assert bench_embedded.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    f, sd = r["figures"], r["streamdet"]
    assert f["pages"] == bench_embedded.SMOKE_PAGES
    assert f["ratio"] > 0 and f["ratio_cpu"] > 0
    # a run takes at least its busiest serial thread's CPU, and its CPU over the cores
    assert 0 < f["ratio"] <= f["ceiling_main_thread"]
    assert f["ratio"] <= f["ceiling_cores"]
    # the parts of the CPU: the engine's thread and the analysis process did the work,
    # and together the parts are no more than the kernel's total for the run
    ms = f["cpu_ms_per_page"]
    assert ms["main thread"] > 0 and ms["child processes"] > 0
    assert sum(ms.values()) * f["pages"] / 1e3 <= sd["cpu_seconds"] + 0.1
    assert f["floor_cpu_ms_per_page"] > 0
    assert f["peak_rss_all_mb"] >= f["peak_rss_mb"] > 0
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_ceilings_are_the_floor_time_over_the_least_time_a_run_can_take():
    c = bench_embedded.ceilings(floor_wall=10.0, cpu=40.0, main_thread_cpu=25.0)
    cores = bench_embedded.os.cpu_count()
    assert c["ceiling_main_thread"] == 10.0 / 25.0
    assert c["ceiling_cores"] == cores * 10.0 / 40.0
