"""What every benchmark shares: the machine it runs on, how fast that machine is right
now, and matplotlib without a display. Its own module so that the benchmarks and the
report (which reads their results) import it without importing each other."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path


def vm_speed(loops: int = 2_000_000) -> float:
    """Seconds of a fixed pure-Python loop (2 M steps: ~0.15 s at this VM's best): its
    speed drifts by 2-3x within minutes, so each figure is reported with the speed it was
    measured at."""
    t = time.perf_counter()
    x = 0
    for i in range(loops):
        x += i * i % 7
    return round(time.perf_counter() - t, 3)


def machine() -> dict:
    """What the figures were measured on (load averages are taken by the caller)."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f
                          if ln.startswith("model name")), model)
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal"))
            mem = round(kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return {"cpu_model": model, "cpus": os.cpu_count(), "memory_gb": mem,
            "python": platform.python_version(), "platform": platform.platform()}


def pyplot():
    """matplotlib's pyplot on the Agg backend (benchmarks run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_result(result: dict, out_dir: Path, size: str, out: str | None = None) -> Path:
    """A benchmark's result as `out`, or OUT_DIR/<benchmark>-<size>-<UTC stamp>.json."""
    path = Path(out) if out else out_dir / (
        f"{result['benchmark']}-{size}-{result['at'].replace(':', '').replace('-', '')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return path
