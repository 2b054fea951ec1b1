"""SIGKILL `streamdet run` at random moments, run it again until it finishes, and compare
with an uninterrupted run: same dump byte for byte, same state, and an events file that
only repeats (never invents, skips or reorders) what the clean run emitted."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import defaultdict

import pytest

from .cli_helpers import (
    build_crawl,
    dump,
    popen,
    read_jsonl,
    streamdet,
    summary,
    with_bad,
    write_jsonl,
)

PARAMS = ["--batch", "16", "-m", "8"]  # m=8: the 12-page boilerplate crosses the cap
LOGICAL = ("docs", "names", "urls", "dead")


def _mirrors() -> list[dict]:
    crawl = build_crawl()
    return [dict(r, url=f"https://mirror{i}.example.org/copy") for i, r in
            enumerate(x for x in crawl[:60:3] if isinstance(x, dict))]


def _tables(state) -> dict:
    from streamdet.state.kv import TABLES
    from streamdet.state.rocks import RocksKV

    kv = RocksKV(str(state))
    try:
        return {t: dict(kv.items(t)) for t in TABLES}
    finally:
        kv.close()


def _strip(ev: dict) -> dict:
    return {k: v for k, v in ev.items() if k != "at"}


def _subject(ev: dict) -> tuple[str, ...]:
    """What an event's seq counts (docs/spec.md): its page's URL, its site at its level,
    or its neighbourhood."""
    if "url" in ev:
        return ("url", ev["url"])
    if "site" in ev:
        return ("site", ev["level"], ev["site"])
    return ("neighbourhood", ev["neighbourhood"])


@pytest.fixture(scope="module")
def crash_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("crash")
    rng = random.Random(11)
    crawl = with_bad(build_crawl(), rng)
    big = write_jsonl(d / "BIG.jsonl", crawl[:-40])
    tail = write_jsonl(d / "TAIL.jsonl.gz", crawl[-40:], gz=True)
    return d, [big, tail]


@pytest.fixture(scope="module")
def clean_run(crash_inputs):
    d, inputs = crash_inputs
    state, events = d / "clean-state", d / "clean-events.jsonl"
    args = ["run", "--state", state, "--events", events, *PARAMS]
    for p in inputs:
        args += ["--input", p]
    t0 = time.monotonic()
    streamdet(*args)
    return state, events, time.monotonic() - t0, args


def test_killed_runs_end_in_the_same_state(crash_inputs, clean_run):
    d, inputs = crash_inputs
    clean_state, clean_events, clean_seconds, _ = clean_run
    seed = int(os.environ.get("STREAMDET_CRASH_SEED", "20261125"))  # reproducible; vary it
    rng = random.Random(seed)
    state, events = d / f"killed-state-{seed}", d / f"killed-events-{seed}.jsonl"
    args = ["run", "--state", state, "--events", events, *PARAMS]
    for p in inputs:
        args += ["--input", p]

    kills, landed, finished = 0, 0, False
    while not finished:
        err_path = d / f"stderr-{seed}-{kills}.txt"
        with open(err_path, "wb") as err:
            proc = popen(*args, stdout=subprocess.DEVNULL, stderr=err)
        if kills < 5:
            delay = rng.uniform(0.3, 0.3 + 0.6 * clean_seconds)
            try:
                proc.wait(timeout=delay)
            except Exception:  # still running: kill it mid-way
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                landed += 1
            kills += 1
        else:
            proc.wait(timeout=300)
        if proc.returncode == 0:
            finished = True
        else:
            assert proc.returncode == -signal.SIGKILL, (
                f"seed {seed}: exit {proc.returncode}: {err_path.read_text(errors='replace')}")
    assert landed >= 1, f"seed {seed}: no kill landed while the run was working"

    # The result: the same dump, byte for byte, and the same logical state: documents,
    # names, URL entries, withdrawn versions, docno counter and input positions. (The gram
    # index's physical layout - overlay vs segments - may differ with when compaction ran.)
    assert dump(state) == dump(clean_state), f"seed {seed}: dumps differ after {landed} kills"
    got, want = _tables(state), _tables(clean_state)
    for table in LOGICAL:
        assert got[table] == want[table], (
            f"seed {seed}: table {table} differs after {landed} kills (a batch applied twice, "
            "or lost)")
    for key in (b"next_docno", b"positions", b"params"):
        assert got["meta"][key] == want["meta"][key], (seed, key)
    # ... and both gram indexes answer alike: mirrors of many pages on new domains
    # look up most grams of the crawl
    probe = write_jsonl(d / f"probe-{seed}.jsonl", _mirrors())
    copies = []
    for st in (state, clean_state):
        copy = d / f"{st.name}-probed-{seed}"
        shutil.copytree(st, copy)
        streamdet("run", "--input", probe, "--state", copy, "--events", "-", *PARAMS)
        copies.append(dump(copy))
    assert copies[0] == copies[1], f"seed {seed}: the states diverge on new input"

    # Events: at-least-once. Every line is whole; past exact repeats, seq grows per subject
    # (URL, site or neighbourhood); every (subject, seq) event is the clean run's event, and
    # all of them are there.
    clean = [_strip(e) for e in read_jsonl(clean_events)]
    killed_lines = events.read_bytes().splitlines()
    killed = [_strip(json.loads(line)) for line in killed_lines]  # raises on a torn line
    by_key = {(_subject(e), e["seq"]): e for e in clean}
    assert len(by_key) == len(clean), "the clean run repeated an event"
    # A batch killed between its events' flush and its commit is applied again, and its
    # events come again as exact repeats (SPEC §9): a batch with two events of one URL
    # (a rescore, then a partial) repeats as "2, 3, 2, 3". Past the repeats, seq grows.
    last_seq: dict[tuple[str, ...], int] = defaultdict(int)
    seen: set[tuple[tuple[str, ...], int]] = set()
    for e in killed:
        key = (_subject(e), e["seq"])
        assert by_key.get(key) == e, f"seed {seed}: event not in the clean run: {e}"
        if key in seen:
            continue
        seen.add(key)
        assert e["seq"] > last_seq[key[0]], f"seed {seed}: seq went back for {key[0]}"
        last_seq[key[0]] = e["seq"]
    assert {(_subject(e), e["seq"]) for e in killed} == set(by_key), f"seed {seed}: events lost"
    newest_clean = {_subject(e): e for e in clean}
    newest_killed = {_subject(e): e for e in killed}
    assert newest_killed == newest_clean

    # Dead letters: at-least-once too, and exactly the clean run's set.
    def dead_set(path):
        return {(x["source"], x["index"], x["reason"]) for x in read_jsonl(path)}

    assert dead_set(state / "dead-letter.jsonl") == dead_set(clean_state / "dead-letter.jsonl")
    assert len(dead_set(clean_state / "dead-letter.jsonl")) >= 6  # one per reason (with_bad)


def test_rerun_after_completion_changes_nothing(crash_inputs, clean_run):
    clean_state, clean_events, _, args = clean_run
    before_dump, before = dump(clean_state), _tables(clean_state)
    n_events = len(read_jsonl(clean_events))
    proc = streamdet(*args)
    s = summary(proc.stderr)
    assert s["pages"] == 0 and s["skipped"] > 0 and s["dead_total"] == 0, s["line"]
    assert dump(clean_state) == before_dump
    assert _tables(clean_state)["meta"] == before["meta"]
    assert len(read_jsonl(clean_events)) == n_events


def test_sigterm_stops_between_batches_and_resumes(crash_inputs, clean_run, tmp_path):
    """SIGTERM (and Ctrl-C) stop the run with status 130 and a one-line message, the state
    closed cleanly; the next run finishes the job. The records come through a pipe held
    open, so the run is still reading when the signal comes, however fast the machine."""
    _, (big, tail) = crash_inputs
    clean_state, _, _, _ = clean_run
    state, events = tmp_path / "s", tmp_path / "ev.jsonl"
    with open(tmp_path / "err", "wb") as err:
        proc = popen("run", "--input", "-", "--state", state, "--events", events, *PARAMS,
                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
        feeder = threading.Thread(target=_feed, args=(proc.stdin, big.read_bytes()),
                                  daemon=True)
        feeder.start()
        # wait until the run has committed something, then ask it to stop
        deadline = time.monotonic() + 120
        while not (events.exists() and events.stat().st_size):
            assert proc.poll() is None and time.monotonic() < deadline, "nothing committed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=10)  # SPEC §9: within 10 s
        feeder.join(timeout=15)
    text = (tmp_path / "err").read_text()
    assert status == 130, text
    assert "interrupted" in text and "Traceback" not in text, text
    # the same stream again: it continues where it stood
    s = summary(streamdet("run", "--input", "-", "--input", tail, "--state", state,
                          "--events", events, *PARAMS, input=big.read_bytes()).stderr)
    assert s["skipped"] > 0  # what the first run applied is not applied again
    assert dump(state) == dump(clean_state)


def test_torn_output_lines_are_cut_on_restart(crash_inputs, clean_run, tmp_path):
    """A run killed in the middle of writing a line leaves half a line; that batch was not
    committed, so the next run cuts the half line off and writes it again in full."""
    d, inputs = crash_inputs
    _, clean_events, _, _ = clean_run
    events, dead = tmp_path / "ev.jsonl", tmp_path / "dl.jsonl"
    events.write_bytes(b'{"event":"quilt","url":"https://half.example.com/","se')
    dead.write_bytes(b'{"reason":"not_json"}\n{"reason":"no_')
    args = ["run", "--state", tmp_path / "s", "--events", events, "--dead-letter", dead,
            *PARAMS]
    for p in inputs:
        args += ["--input", p]
    streamdet(*args)
    got = [_strip(e) for e in read_jsonl(events)]  # every line parses
    assert got == [_strip(e) for e in read_jsonl(clean_events)]
    lines = read_jsonl(dead)
    assert lines[0] == {"reason": "not_json"} and all("source" in x for x in lines[1:])


def _feed(pipe, data: bytes) -> None:
    """Write `data` to a run's stdin and leave the pipe open (the run waits for more)."""
    try:
        pipe.write(data)
        pipe.flush()
    except (BrokenPipeError, ValueError):
        pass  # the run was killed while reading


def _processes_tagged(tag: str) -> list[int]:
    """Live processes whose environment carries `tag` (a run and anything it started)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if tag.encode() in f.read():
                    with open(f"/proc/{pid}/stat") as st:
                        if st.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("delay", [0.3, 1.5, 4.0])
def test_sigkill_leaves_no_analysis_processes_behind(crash_inputs, tmp_path, monkeypatch, delay):
    """The analysis worker processes die with a killed run, also when the run dies while
    they are still starting up."""
    _, (records, _tail) = crash_inputs
    tag = f"STREAMDET_TEST_TAG=crash-{os.getpid()}-{delay}"
    monkeypatch.setenv(*tag.split("=", 1))
    # The records come through a pipe held open, so the run is still reading (never
    # finished) when it is killed, however fast the machine is.
    proc = popen("run", "--input", "-", "--state", tmp_path / "s", "--events",
                 tmp_path / "ev.jsonl", "--analyzers", "1", "--batch", "8",
                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    feeder = threading.Thread(target=_feed, args=(proc.stdin, records.read_bytes()), daemon=True)
    feeder.start()
    time.sleep(delay)
    assert proc.poll() is None and _processes_tagged(tag), "the run is not running"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    feeder.join(timeout=15)
    deadline = time.monotonic() + 15
    while _processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_tagged(tag) == []
