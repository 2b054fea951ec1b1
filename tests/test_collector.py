"""The collector thresholds a long-running command sets (streamdet/adapters/collector.py)."""

from __future__ import annotations

import gc
import json

from streamdet import cli
from streamdet.adapters.collector import THRESHOLDS


def _run_cli(argv: list[str]) -> tuple[int, tuple[int, int, int]]:
    """Run the CLI in this process; the thresholds it left, restored afterwards."""
    before = gc.get_threshold()
    try:
        code = cli.main(argv)
        return code, gc.get_threshold()
    finally:
        gc.set_threshold(*before)


def test_run_sets_the_thresholds_and_dump_does_not(tmp_path, capsys) -> None:
    page = {"url": "https://a.example/1", "text": "one two three four five six seven"}
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(page) + "\n", encoding="utf-8")
    gc.set_threshold(700, 10, 10)
    try:
        code, after = _run_cli(["run", "--input", str(src), "--state", str(tmp_path / "s"),
                                "--events", str(tmp_path / "ev.jsonl")])
        assert code == 0 and after == THRESHOLDS
        code, after = _run_cli(["dump", "--state", str(tmp_path / "s")])
        assert code == 0 and after == (700, 10, 10)  # a short command keeps the default
        assert json.loads(capsys.readouterr().out.splitlines()[0])["url"] == page["url"]
    finally:
        gc.set_threshold(700, 10, 10)
