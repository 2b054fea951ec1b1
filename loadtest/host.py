"""What every benchmark shares: the machine it runs on, how fast that machine is right
now, matplotlib without a display, and how a loadtest module is started in a child
process. Its own module so that the benchmarks and the report (which reads their results)
import it without importing each other."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

# The memory target of the benchmarks (issue 23): peak RSS of a run's or a worker's
# processes <= its --memory + this (interpreters, libraries and code are outside it)
MEMORY_SLACK = 200 << 20
REPO = Path(__file__).resolve().parent.parent


def module_command(module: str, *args: str) -> list[str]:
    """A loadtest module in a fresh interpreter, `python -m loadtest.MODULE ARGS`: how a
    benchmark starts its own children (its hidden child options)."""
    return [sys.executable, "-m", f"loadtest.{module}", *args]


def module_env(**extra: str) -> dict[str, str]:
    """This process's environment with `extra` and the repository first on PYTHONPATH: a
    module_command child imports loadtest whatever its working directory, as its parent
    did (run with -m from the repository root, or imported by the tests)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, **extra,
            "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


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


class TreeRss:
    """Peak resident memory of a process and all its descendants (an analysis pool, a
    broker's children), sampled from /proc every `interval` seconds by a thread: the sum
    over the tree at each sample, its peak, and each process's own peak. ru_maxrss of a
    waited-for child is that one process's peak only, not its children's too.

    Each sample also reads every thread's CPU seconds, so that a run's CPU can be split
    by who spent it (`cpu_parts`): rusage gives the total only, and a serial thread's
    share bounds the throughput where the total does not. A thread's last sample may be
    up to `interval` before it ended; the root process's own totals (its threads, live
    and ended, and its waited-for children) give what the samples of ended threads and
    children missed, so the parts fall short of the total only by what was spent after
    the root's last sample."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        import threading

        self.pid, self.interval = pid, interval
        self.peak_total = 0
        self.peaks: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.cpu: dict[tuple[int, int], tuple[str, float]] = {}  # (pid, tid): name, CPU s
        self.root_cpu = (0.0, 0.0)  # the root's threads, its waited-for children: CPU s
        self._tick = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._thread.start()

    def _tree(self) -> dict[int, list[str]]:
        """Every process of the tree, with its threads' ids (listed once a sample: the
        walk needs them for the children, the CPU split for the threads)."""
        tree: dict[int, list[str]] = {}
        todo = [self.pid]
        while todo:
            pid = todo.pop()
            tree[pid] = []
            try:
                tree[pid] = os.listdir(f"/proc/{pid}/task")
                for tid in tree[pid]:
                    with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                        todo.extend(int(c) for c in f.read().split())
            except OSError:
                pass
        return tree

    def _rss(self, pid: int) -> int:
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as f:
                return int(f.read().split()[1]) * self._page
        except (OSError, IndexError, ValueError):
            return 0

    def _stat(self, path: str) -> tuple[str, list[str]] | None:
        """The name and the fields after it of a /proc stat file ("id (comm) state ...":
        comm may hold spaces and parentheses, so split after its last ")")."""
        try:
            with open(path, encoding="utf-8") as f:
                stat = f.read()
        except OSError:
            return None
        return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()

    def _seconds(self, fields: list[str], first: int) -> float:
        return (int(fields[first]) + int(fields[first + 1])) / self._tick

    def _threads_cpu(self, pid: int, tids: list[str]) -> None:
        """Each thread's name and CPU seconds (user + system) so far; for the root, its
        whole process's too."""
        for tid in tids:
            stat = self._stat(f"/proc/{pid}/task/{tid}/stat")
            if stat is not None:  # utime, stime
                self.cpu[pid, int(tid)] = (stat[0], self._seconds(stat[1], 11))
        if pid == self.pid and (stat := self._stat(f"/proc/{pid}/stat")) is not None:
            # utime + stime of all its threads; cutime + cstime of its waited-for children
            self.root_cpu = (self._seconds(stat[1], 11), self._seconds(stat[1], 13))

    def cpu_parts(self) -> dict[str, float]:
        """CPU seconds by who spent them: the root process's main thread, its RocksDB
        threads (flushes and compactions), its other threads, and every other process of
        the tree (an analysis pool, a broker's children)."""
        parts = dict.fromkeys(("main thread", "rocksdb threads", "other threads",
                               "child processes"), 0.0)
        for (pid, tid), (name, seconds) in self.cpu.items():
            if pid != self.pid:
                parts["child processes"] += seconds
            elif tid == pid:
                parts["main thread"] += seconds
            elif name.startswith("rocksdb"):
                parts["rocksdb threads"] += seconds
            else:
                parts["other threads"] += seconds
        # what ended threads and waited-for children spent after their last sample
        threads, children = self.root_cpu
        sampled = parts["main thread"] + parts["rocksdb threads"] + parts["other threads"]
        parts["other threads"] += max(0.0, threads - sampled)
        parts["child processes"] = max(parts["child processes"], children)
        return {who: round(seconds, 6) for who, seconds in parts.items()}  # sums of ticks

    def sample(self) -> int:
        total = 0
        for pid, tids in self._tree().items():
            self._threads_cpu(pid, tids)
            rss = self._rss(pid)
            total += rss
            if rss > self.peaks.get(pid, 0):
                self.peaks[pid] = rss
                if pid not in self.names:
                    try:
                        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
                            self.names[pid] = f.read().strip()
                    except OSError:
                        self.names[pid] = "?"
        self.peak_total = max(self.peak_total, total)
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        """Stop sampling; the peaks in bytes (`processes`: each one's own peak, largest
        first, with its name)."""
        self._stop.set()
        self._thread.join()
        procs = sorted(self.peaks.items(), key=lambda kv: -kv[1])
        return {"peak_total_bytes": self.peak_total, "processes": len(procs),
                "cpu_parts_seconds": self.cpu_parts(),
                "peaks": [{"pid": p, "name": self.names.get(p, "?"), "peak_rss_bytes": r}
                          for p, r in procs[:8]]}
