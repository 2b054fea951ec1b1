"""A small `streamdet run` state for the review desk's tests: five sources and a quilt
of their words whose text and URL hold HTML (`<script>`), source 0 giving it two
separate passages."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

from .cli_helpers import popen, streamdet, write_jsonl

QUILT = 'http://q.example/quilt?q=<script>alert("u")</script>'
TOKEN = "t0ken-for-the-review-desk-tests"


def planted_state(tmp: Path) -> tuple[Path, Path, dict]:
    """(state, events file, the quilt's event); the records are in tmp/in.jsonl."""
    make_planted(tmp)
    return planted_in(tmp)


def make_planted(tmp: Path) -> None:
    """The planted records in tmp/in.jsonl, and a `streamdet run` of them."""
    words = [[f"s{i}w{j}" for j in range(60)] for i in range(5)]
    records = [{"url": f"http://s{i}.example/p", "text": " ".join(w)}
               for i, w in enumerate(words)]
    taken = [" ".join(w[5 + i : 20 + i]) for i, w in enumerate(words)]
    taken.append(" ".join(words[0][40:52]))  # source 0's second passage
    records.append({"url": QUILT, "text": " <script>alert(1)</script> ".join(taken)})
    records.append({"url": "http://plain.example/", "text": "nothing copied here at all"})
    write_jsonl(tmp / "in.jsonl", records)
    streamdet("run", "--input", tmp / "in.jsonl", "--state", tmp / "state", "--events",
              tmp / "events.jsonl", "-k", "3")


def planted_in(tmp: Path) -> tuple[Path, Path, dict]:
    """(state, events file, the quilt's event) of the run make_planted made in tmp."""
    state, events = tmp / "state", tmp / "events.jsonl"
    [quilt] = [e for e in map(json.loads, events.read_text().splitlines())
               if e["event"] == "quilt"]
    assert quilt["url"] == QUILT and [len(s["spans"]) for s in quilt["sources"]][0] == 2
    return state, events, quilt


SHARDS = "2"
TIMING = {"STREAMDET_SESSION_MS": "3000", "STREAMDET_HEARTBEAT_MS": "300"}


class KafkaReview:
    """A pipeline of one worker on the test broker, fed `records`, and instances of
    `streamdet review --broker` in one group (real processes; logs in `tmp`)."""

    def __init__(self, broker, tmp: Path, records: Path, *params: str) -> None:
        from .kafka_broker import unique_name

        self.broker, self.tmp = broker, tmp
        self.prefix, self.group = unique_name("rv"), unique_name("rvg")
        self.args = ["--broker", broker.bootstrap, "--prefix", self.prefix]
        self.worker = popen("worker", *self.args, "--state", tmp / "worker", "--shards",
                            SHARDS, *params, extra_env=TIMING,
                            stdout=open(tmp / "worker.log", "ab"),  # noqa: SIM115
                            stderr=subprocess.STDOUT)
        streamdet("produce", *self.args, "--shards", SHARDS, records)
        self.desks: dict[str, subprocess.Popen] = {}
        self.bases: dict[str, str] = {}

    def start(self, name: str, token: str | None = TOKEN, timeout: float = 120) -> str:
        """Start desk instance `name`; its base URL once it serves."""
        log = self.tmp / f"desk-{name}.log"
        log.write_bytes(b"")
        self.desks[name] = popen(
            "review", *self.args, "--group", self.group, "--desk", self.tmp / "desk",
            "--bind", "127.0.0.1:0", extra_env={"STREAMDET_REVIEW_TOKEN": token or ""},
            stdout=subprocess.DEVNULL, stderr=open(log, "ab"))  # noqa: SIM115
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"review desk on (http://127\.0\.0\.1:\d+)/", log.read_text())
            if found:
                self.bases[name] = found.group(1)
                return found.group(1)
            if self.desks[name].poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"desk {name} did not start:\n{log.read_text()[-3000:]}")

    def log(self, name: str) -> str:
        return (self.tmp / f"desk-{name}.log").read_text()

    def stop(self) -> None:
        for proc in [*self.desks.values(), self.worker]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.desks.values(), self.worker]:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(check, timeout: float = 120, every: float = 0.5):
    """check()'s first truthy answer within `timeout` seconds (the last answer after it)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(every)
