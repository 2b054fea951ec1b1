"""The review desk in a real browser (the distribution's Chromium, driven by Playwright)
against `streamdet review` serving a real state: log in, open the quilt from the list,
count each source's highlighted spans against the event, label it from the keyboard,
reload, see the label. The desk makes its own token (mode 0600) and never logs it."""

from __future__ import annotations

import re
import signal
import stat
import subprocess
from collections import defaultdict

import pytest
from playwright.sync_api import sync_playwright

from .cli_helpers import popen
from .review_helpers import QUILT, planted_state

CHROMIUM = "/usr/bin/chromium"  # apt-get install chromium (.ci/run)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    state, events, quilt = planted_state(tmp)
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
    yield found.group(1), token_file.read_text().strip(), quilt, token_file, lines, proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def test_log_in_open_a_quilt_count_its_spans_label_it_and_see_the_label(served):
    base, token, quilt, token_file, lines, proc = served
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
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
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=30)[1].decode()
    assert token not in "".join(lines) + rest
