"""The review desk in a real browser (the distribution's Chromium, driven by Playwright)
against `streamdet review` serving a real state, and serving a Kafka pipeline on the test
broker: log in, open the quilt from the list, count each source's highlighted spans
against the event, label it from the keyboard, reload, see the label. The desk makes
its own token (mode 0600) and never logs it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
from collections import defaultdict

import httpx
import pytest
from playwright.sync_api import sync_playwright

from .cli_helpers import popen
from .kafka_broker import kafka_broker_fixture  # noqa: F401
from .review_helpers import QUILT, KafkaReview, planted_state, wait_for


def chromium() -> str:
    """The distribution's Chromium (scripts/test installs it), or STREAMDET_CHROMIUM;
    missing, the browser tests fail rather than skip."""
    path = (os.environ.get("STREAMDET_CHROMIUM") or shutil.which("chromium")
            or shutil.which("chromium-browser"))
    if path is None:
        pytest.fail("Chromium not found: run scripts/test (it installs it), or set "
                    "STREAMDET_CHROMIUM to a Chromium binary")
    return path


ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@pytest.fixture(scope="module", params=["embedded", "kafka"])
def served(request, tmp_path_factory):
    """The desk serving the planted quilt: embedded on a `streamdet run` state, or on
    Kafka fed by a pipeline on the test broker. (base URL, the token it made, the quilt's
    event, the token's file, its log so far, its process)."""
    tmp = tmp_path_factory.mktemp(f"browser-{request.param}")
    state, events, quilt = planted_state(tmp)
    if request.param == "kafka":
        run = KafkaReview(request.getfixturevalue("kafka_broker"), tmp, tmp / "in.jsonl",
                          "-k", "3")
        base = run.start("a", token=None)
        token_file = tmp / "desk" / "token"
        token = token_file.read_text().strip()
        listed = wait_for(lambda: httpx.get(base + "/api/quilts", headers={
            "Authorization": f"Bearer {token}"}).json()["total"], timeout=120)
        assert listed == 1
        yield base, token, quilt, token_file, lambda: run.log("a"), run.desks["a"]
        run.stop()
        return
    proc = popen("review", "--state", state, "--events", events, "--desk", tmp / "desk",
                 "--bind", "127.0.0.1:0", extra_env={"STREAMDET_REVIEW_TOKEN": ""},
                 stderr=subprocess.PIPE)
    lines = []
    for line in proc.stderr:
        lines.append(line.decode())
        found = re.search(r"review desk on (http://127\.0\.0\.1:\d+)/", lines[-1])
        if found:
            break
    else:
        raise AssertionError("the desk did not start:\n" + "".join(lines))
    token_file = tmp / "desk" / "token"

    def log() -> str:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            lines.append(proc.communicate(timeout=30)[1].decode())
        return "".join(lines)
    yield found.group(1), token_file.read_text().strip(), quilt, token_file, log, proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_log_in_open_a_quilt_count_its_spans_label_it_and_see_the_label(served, request):
    base, token, quilt, token_file, log, proc = served
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=ARGS)
        try:
            page = browser.new_page()
            page.goto(base + "/quilts")
            assert "/login" in page.url
            page.fill("input[name=name]", "ann")
            page.fill("input[name=secret]", token)
            page.click("form.login button[type=submit]")
            page.wait_for_selector("table#quilts a.open")
            assert token not in page.url
            page.click("table#quilts a.open")
            page.wait_for_selector("#pagetext")
            assert page.url.startswith(base + "/page?url=")
            spans = defaultdict(set)
            for names in page.eval_on_selector_all(
                    "#pagetext mark", "ms => ms.map(m => m.dataset.spans)"):
                for name in names.split():
                    source, span = name.split(":")
                    spans[int(source)].add(int(span))
            assert {s: len(v) for s, v in spans.items()} == {
                i: len(src["spans"]) for i, src in enumerate(quilt["sources"])}
            assert page.inner_text("h1.url") == QUILT  # shown as text, not run
            # the page's figures as the API gives them (a key named like a dict's method
            # must read as the key: `page.pop` in a template is the dict's `pop`)
            # (embedded: the state's figures; on Kafka the records hold none: a dash)
            api = httpx.get(base + "/api/page", params={"url": QUILT},
                            headers={"Authorization": f"Bearer {token}"}).json()["page"]
            pop, contains = (str(api[key]) if api[key] is not None else "—"
                             for key in ("pop", "contains"))
            assert (pop == "—") == (request.node.callspec.params["served"] == "kafka")
            assert page.inner_text("#pop") == f"pop(d) {pop}"
            assert page.inner_text("#contains") == f"contains(L, f) {contains}"
            page.fill("textarea[name=note]", "copied from five blogs")
            page.click("h1.url")  # out of the note: keys are shortcuts again
            page.keyboard.press("s")
            page.wait_for_selector(".saved")
            page.reload()
            label = page.inner_text("#current-label")
            assert label.startswith("Now: spam by ann") and "copied from five blogs" in label
            page.goto(base + "/quilts?label=spam")
            assert page.inner_text("table#quilts a.open") == QUILT
        finally:
            browser.close()
    assert proc.poll() is None
    assert token not in log()
