"""How bench_growth judges a run: where a checkpoint's window began, the growth after the
stream's warm-up (means of the first and last windows, wall time and per VM speed), and
the verdict against the target. Its own module because the report judges published
results with it too, and must not import the benchmark (which imports the report's
plots through bench_embedded)."""

from __future__ import annotations

TARGET_GROWTH = 1.5  # engine ms/page at the end over the start, after the warm-up
SMOOTH = 5  # windows averaged at each end for the smoothed growth


def window_start(row: dict) -> int:
    """New documents in the state when a checkpoint's window began (re-fetches are
    arrivals but not new documents)."""
    return row["documents"] - row["window_arrivals"] + row.get("window_refetches", 0)


def stationary_growth(rows: list[dict], warmup_docs: int) -> dict | None:
    """ms/page at the last checkpoint over the first window that starts once every page
    has had its mirror family filled (warm-up: mirrors x pool documents): the growth due
    to the state alone, the stream's make-up being the same from there on."""
    after = [r for r in rows if r["documents"] - r["window_arrivals"] >= warmup_docs * 0.999]
    if not warmup_docs or len(after) < 2:
        return None
    n = min(SMOOTH, len(after) // 2) or 1

    def mean(rs: list[dict], per_speed: bool = False) -> float:
        return sum(r["engine_ms_per_page"] / (r["vm_speed_s"] if per_speed else 1)
                   for r in rs) / len(rs)

    first = after[0]
    out = {"from_documents": first["documents"],  # the first window's end (its checkpoint)
           "window_start_documents": window_start(first),
           "growth": after[-1]["engine_ms_per_page"] / after[0]["engine_ms_per_page"],
           # segment merges are lumpy (a window with a big one costs +50%): means of the
           # first and last `n` windows compare the trend, not where the merges fell
           "windows_averaged": n, "growth_of_means": mean(after[-n:]) / mean(after[:n])}
    if all("vm_speed_s" in r for r in after):
        # the same in units of the VM's speed at the time (ms/page over the seconds of a
        # fixed Python loop): this VM runs 2-3x slower in some hours than in others
        out["growth_of_means_per_vm_speed"] = (mean(after[-n:], True) / mean(after[:n], True))
    return out


def judge(figures: dict, target: float = TARGET_GROWTH) -> dict:
    """Whether a run meets the growth target (see the module's docstring): on the means of
    the first and last windows after the warm-up, wall time and per VM speed both within
    `target`; a run too short for windows after the warm-up is judged on its first and
    last windows (`growth`, the literal ratio, is kept beside as `growth_literal`)."""
    literal = figures["growth"] <= target
    st = figures.get("stationary")
    if not st:
        return {"growth": literal, "growth_literal": literal, "judged_on": "first and last window"}
    worst = max(st["growth_of_means"], st.get("growth_of_means_per_vm_speed", 0.0))
    start = st.get("window_start_documents", 0)
    return {"growth": worst <= target, "growth_literal": literal,
            "judged_on": f"means of the first and last {st['windows_averaged']} windows after "
                         f"the warm-up (from {start:,} documents), wall and per VM speed"}
