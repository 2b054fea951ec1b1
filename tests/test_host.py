"""loadtest/host.py's process-tree sampler: the CPU of a run split by who spent it, which
the benchmarks use to bound a run's throughput by its serial thread."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from loadtest.host import TreeRss

# A parent that burns CPU in its main thread, then in a second thread, while a child
# process it started burns CPU too; each part spins until it has had `SPIN` CPU seconds.
SPIN = 0.4
SCRIPT = f"""
import subprocess, sys, threading, time
def spin():
    end = time.thread_time() + {SPIN}
    while time.thread_time() < end:
        pass
child = subprocess.Popen([sys.executable, "-c",
    "import time\\nend = time.process_time() + {SPIN}\\nwhile time.process_time() < end: pass"])
spin()
t = threading.Thread(target=spin)
t.start()
t.join()
child.wait()
time.sleep(0.3)  # the sampler's last look at the finished threads
"""


def test_cpu_is_split_by_main_thread_other_threads_and_children():
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT])
    tree = TreeRss(proc.pid, interval=0.05)
    _, status, ru = os.wait4(proc.pid, 0)
    result = tree.stop()
    assert os.waitstatus_to_exitcode(status) == 0
    parts = result["cpu_parts_seconds"]
    assert set(parts) == {"main thread", "rocksdb threads", "other threads", "child processes"}
    # each spinner's CPU is seen in full, though the second thread and the child ended
    # between samples: the root's own totals give what their last samples missed (less
    # rounding: /proc gives whole clock ticks, truncated per thread and per total)
    ticks = 2 / os.sysconf("SC_CLK_TCK")
    assert parts["main thread"] >= SPIN - ticks
    assert parts["other threads"] >= SPIN - ticks
    assert parts["child processes"] >= SPIN - ticks
    assert parts["rocksdb threads"] == 0
    # and nothing is counted twice: the parts stay within what the kernel charged the
    # parent and its waited-for child (one clock tick per thread of slack)
    total = ru.ru_utime + ru.ru_stime
    assert sum(parts.values()) <= total + 0.05


def test_a_thread_name_with_spaces_and_parentheses_is_read():
    """/proc/PID/task/TID/stat gives the name in parentheses and it may hold both."""
    proc = subprocess.Popen([sys.executable, "-c",
                             "import threading, time\n"
                             "def f():\n    time.sleep(1.5)\n"
                             "t = threading.Thread(target=f)\nt.start()\n"
                             "open(f'/proc/self/task/{t.native_id}/comm', 'w')"
                             ".write('rocksdb:low (x)')\n"
                             "end = time.thread_time() + 0.2\n"
                             "while time.thread_time() < end: pass\n"
                             "t.join()"])
    tree = TreeRss(proc.pid, interval=0.05)
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    tree.stop()
    names = {name for name, _ in tree.cpu.values()}
    assert "rocksdb:low (x)" in names
    assert tree.cpu_parts()["main thread"] >= 0.2
