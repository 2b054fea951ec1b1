"""loadtest/report.py: which result it picks per benchmark, and the page it writes."""

from __future__ import annotations

import json
from pathlib import Path

from loadtest import report

KAFKA = {
    "benchmark": "bench_kafka", "at": "2026-11-23T04:00:00Z", "config": {"pages": 2000},
    "one_worker": {"pages_per_s": 40.0}, "two_workers": {"pages_per_s": 70.0},
    "scaling": 1.75, "targets": {"scaling": 1.6, "p99_s": 1.0},
    "pass": {"scaling": True, "p99": False},
    "latency": {"rate": 35.0, "events": 3, "p50_s": 0.5, "p99_s": 1.5,
                "latencies_s": [0.4, 0.5, 1.5]},
}


def _write(d: Path, name: str, result: dict) -> Path:
    p = d / name
    p.write_text(json.dumps(result), encoding="utf-8")
    return p


def test_newest_prefers_the_largest_size_then_the_latest(tmp_path):
    _write(tmp_path, "bench_kafka-120p-20261123T050000Z.json", KAFKA)  # a later smoke
    big_old = _write(tmp_path, "bench_kafka-2000p-20261122T010000Z.json", KAFKA)
    big_new = _write(tmp_path, "bench_kafka-2000p-20261122T020000Z.json", KAFKA)
    only_smoke = _write(tmp_path, "bench_lsh-150p-20261123T050000Z.json", {})
    _write(tmp_path, "notes.json", {})
    got = report.newest(tmp_path)
    assert got == {"bench_kafka": big_new, "bench_lsh": only_smoke}
    assert big_old not in got.values()


def test_build_writes_the_page_with_figures_and_plots(tmp_path):
    src = _write(tmp_path, "bench_kafka-2000p-20261122T020000Z.json", KAFKA)
    page = report.build(tmp_path, publish=tmp_path / "pub").read_text(encoding="utf-8")
    assert "scaling **1.75x**" in page and "❌ missed" in page  # p99 1.5 s > 1 s target
    assert "p99 **1500 ms**" in page
    assert "## bench_growth" in page and "no result yet" in page
    png = src.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # drawn, since the bench had not
    assert (tmp_path / "pub" / png.name).exists() and (tmp_path / "pub" / src.name).exists()
    assert f"![bench_kafka]({png.name})" in page


def test_the_kafka_command_is_read_back_from_the_result(tmp_path):
    """A 20,000-page run with one analysis process and one run of each kind is not the
    default command; the default one names no option it did not need."""
    big = dict(KAFKA, config={"pages": 20000, "analyzers": 1},
               throughput_pairs=[{}], latency_runs=[{}])
    _write(tmp_path, "bench_kafka-20000p-20261122T020000Z.json", big)
    page = report.build(tmp_path, publish=None).read_text(encoding="utf-8")
    assert ("`BENCH_ANALYZERS=1 python -m loadtest.bench_kafka --pages 20000 "
            "--throughput-runs 1 --latency-runs 1`") in page
    default = dict(KAFKA, throughput_pairs=[{}] * 3, latency_runs=[{}] * 3)
    assert report.command("bench_kafka", default) == "python -m loadtest.bench_kafka --pages 2000"
    assert report.command("bench_kafka", dict(default, latency_runs=[])).endswith(
        "--pages 2000 --latency-runs 0")


def test_a_smoke_sized_result_is_labelled_as_such(tmp_path):
    _write(tmp_path, "bench_kafka-120p-20261123T050000Z.json", KAFKA)
    page = report.build(tmp_path, publish=None).read_text(encoding="utf-8")
    assert "smoke-size run" in page
    _write(tmp_path, "bench_kafka-2000p-20261122T020000Z.json", KAFKA)
    assert "smoke-size run" not in report.build(tmp_path, publish=None).read_text("utf-8")


def test_growth_headline_gives_the_growth_after_the_warm_up_beside_the_literal_one(tmp_path):
    growth = {"figures": {"documents": 500_000, "first_ms_per_page": 8.0,
                          "last_ms_per_page": 20.0, "growth": 2.5, "warmup_documents": 18_660,
                          "disk_bytes": 14e9, "peak_rss_bytes": 7 * 2**30,
                          "stationary": {"from_documents": 30_000, "windows_averaged": 5,
                                         "growth": 1.5, "growth_of_means": 1.32,
                                         "growth_of_means_per_vm_speed": 1.41}},
              "checkpoints": [{"documents": d, "window_arrivals": 10_100,
                               "window_refetches": 100} for d in range(10_000, 510_000, 10_000)],
              "target": {"growth": 1.5}, "pass": {"growth": False}}
    _write(tmp_path, "bench_growth-500000d-20261124T001359Z.json", growth)
    page = report.build(tmp_path, publish=None).read_text(encoding="utf-8")
    # the literal ratio is printed without a verdict: its first window holds the warm-up
    assert ("8.00 ms/page in the first window (0 to 10,000, with the stream's warm-up), "
            "20.00 in the last: 2.50x\n") in page
    # the verdict is on the means after the warm-up, whatever the result file says
    assert ("from 20,000 documents (the stream's warm-up ends at 18,660): mean of the last 5 "
            "windows over the first 5 **1.32x**, per VM speed **1.41x** (target <= 1.5) ✅; its "
            "first window alone to the last 1.50x") in page
    growth["figures"]["stationary"]["growth_of_means_per_vm_speed"] = 1.64
    _write(tmp_path, "bench_growth-500000d-20261124T001359Z.json", growth)
    page = report.build(tmp_path, publish=None).read_text(encoding="utf-8")
    assert "per VM speed **1.64x** (target <= 1.5) ❌ missed" in page



def test_the_kafka_headline_sets_the_first_full_minute_beside_the_last():
    rows = [{"minute": m, "events": 100, "p50_s": 0.1 * (m + 1), "p99_s": 0.5 * (m + 1),
             "broker_cores": 0.5 + 0.1 * m, "workers_cores": 1.0} for m in range(4)]
    lines = report.headline("bench_kafka", dict(KAFKA, latency=dict(KAFKA["latency"],
                                                                    by_minute=rows)))
    got = [x for x in lines if x.startswith("latency by the minute")]
    assert got == ["latency by the minute its pages were sent: minute 0: p50 100 / p99 500 ms, "
                   "broker 0.50 cores, workers 1.00; minute 2: p50 300 / p99 1500 ms, broker "
                   "0.70 cores, workers 1.00"]
    assert not [x for x in report.headline("bench_kafka", KAFKA)
                if x.startswith("latency by the minute")]  # a result without them


def test_the_kafka_headline_gives_the_latencys_parts_and_the_minutes_verdict():
    cut = {"events": 3, "intake": {"p50_s": 0.1, "p99_s": 0.3},
           "own": {"p50_s": 0.4, "p99_s": 0.9}, "delivery": {"p50_s": 0.01, "p99_s": 0.02}}
    targets = dict(KAFKA["targets"], minute_p99_s=2.0, own_minute_p99_s=1.0, early_minutes=10)
    result = dict(KAFKA, latency=dict(KAFKA["latency"], stages=cut), targets=targets,
                  **{"pass": dict(KAFKA["pass"], minutes=True)})
    [got] = [x for x in report.headline("bench_kafka", result) if "the latency's parts" in x]
    assert got.startswith("the latency's parts (the workers' record timestamps): intake p50 "
                          "100 / p99 300 ms, own p50 400 / p99 900 ms, delivery p50 10 / p99 "
                          "20 ms; minutes:")
    assert got.endswith("in the first 10 ✅")
    assert not [x for x in report.headline("bench_kafka", KAFKA) if "parts" in x]


def test_the_kafka_latency_says_whether_late_events_were_waited_for():
    def line(lat: dict) -> str:
        lines = report.headline("bench_kafka", dict(KAFKA, latency=lat))
        return next(x for x in lines if x.startswith("latency at"))

    assert line(dict(KAFKA["latency"], drain_s=563.2)).endswith(
        "; the pipeline idle 563 s after the last page")
    assert line(KAFKA["latency"]).endswith(
        "those a shard behind sent later are not in these figures")


def test_a_result_of_another_machine_names_it(tmp_path):
    """The page names the machine most results come from; a result measured elsewhere
    says where, so that nobody compares its figures with the others'."""
    usual = {"cpu_model": "AMD EPYC", "cpus": 2, "memory_gb": 23.5, "python": "3.11.7"}
    other = dict(usual, cpu_model="Intel(R) Xeon(R) Processor")
    path = _write(tmp_path, "bench_kafka-2000p-20261122T020000Z.json", dict(KAFKA, host=other))
    results = {"bench_kafka": (path, dict(KAFKA, host=other)),  # and two of the usual one
               "a": (path, {"host": usual}), "b": (path, {"host": usual})}
    page = report.render(results, dict(usual, cpu_model="this machine"))
    assert "Machine: AMD EPYC, 2 CPUs, 23.5 GB, Python 3.11.7, unless a result" in page
    kafka = page.split("## bench_kafka")[1].split("## ")[0]
    assert "Measured on another machine: Intel(R) Xeon(R) Processor, 2 CPUs" in kafka
    assert page.count("Measured on another machine") == 1
