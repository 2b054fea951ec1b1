"""loadtest/profile_run.py's tables of a py-spy raw profile: by part, below a function
(inclusive) and by caller, each counting the main process's stacks only where asked."""

from __future__ import annotations

from pathlib import Path

from loadtest import profile_run as pr

MAIN = 'process 11:"python -m streamdet run --input s.jsonl"'
ANALYSIS = ('process 12:"python -c from multiprocessing.spawn import spawn_main; '
            'spawn_main(tracker_fd=5) --multiprocessing-fork"')
ROOT = "main (/v/streamdet/cli.py:10)"
COMMIT = "Txn.commit (/v/streamdet/state/txn.py:700)"
READ = "RocksKV.get_many (/v/streamdet/state/rocks.py:206)"
STACKS = [
    ([MAIN, ROOT, COMMIT, "RocksKV.write (/v/streamdet/state/rocks.py:257)"], 30),
    ([MAIN, ROOT, COMMIT, "PostingCache.update (/v/streamdet/state/posting_cache.py:120)"],
     20),
    ([MAIN, ROOT, "plan_batch (/v/streamdet/engine/postings.py:72)",
      "Txn.prefetch (/v/streamdet/state/txn.py:219)",
      "SegmentIndex.find (/v/streamdet/state/segments.py:470)", READ], 50),
    ([MAIN, ROOT, "DocRole._load (/v/streamdet/engine/doc_role.py:120)",
      "Txn.load_docs (/v/streamdet/state/txn.py:330)", READ], 15),
    ([ANALYSIS, "_serve (/v/streamdet/adapters/watchdog.py:40)", COMMIT, READ], 40),
]


def _raw(tmp_path: Path) -> str:
    path = tmp_path / "raw.txt"
    path.write_text("".join(f"{';'.join(frames)} {n}\n" for frames, n in STACKS))
    return str(path)


def test_below_a_function_counts_its_stacks_from_there_down_in_the_main_process(tmp_path):
    counts, total = pr.inclusive(_raw(tmp_path), "Txn.commit")
    assert total == 50  # the analysis process's stack through Txn.commit is not counted
    assert counts["Txn.commit (state/txn.py)"] == 50
    assert counts["RocksKV.write (state/rocks.py)"] == 30
    assert counts["PostingCache.update (state/posting_cache.py)"] == 20
    assert "main (streamdet/cli.py)" not in counts  # above it


def test_callers_name_the_functions_above_the_leaf_innermost_first(tmp_path):
    counts = pr.callers(_raw(tmp_path), "RocksKV.get_many", depth=2)
    assert counts == {"SegmentIndex.find < Txn.prefetch": 50,
                      "Txn.load_docs < DocRole._load": 15}


def test_the_command_prints_the_part_table_then_each_asked_table(tmp_path, capsys):
    out = tmp_path / "profile.md"
    assert pr.main(["--raw", _raw(tmp_path), "--title", "t", "--under", "Txn.commit",
                    "--callers", "RocksKV.get_many", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.index("### t\n") < text.index("### t: below Txn.commit (1.0 CPU s)")
    assert "| `RocksKV.write (state/rocks.py)` | 0.6 |" in text
    assert "### t: RocksKV.get_many by caller (1.3 CPU s)" in text
    assert "| `SegmentIndex.find < Txn.prefetch < plan_batch` | 1.0 |" in text
    assert out.read_text() == text
