"""loadtest/bench_replication.py end to end at smoke size: its figures are there and make
sense (no timing is judged), and the §8 work it takes out for the baseline comes back."""

from __future__ import annotations

import json

from loadtest import bench_replication as br


def test_smoke_run_reports_cost_state_and_quality(tmp_path):
    out = tmp_path / "r.json"
    assert br.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    f, qs = r["figures"], r["quality"]
    q = qs["blind"]
    assert f["pages"] > 250 and f["engine_ms_per_page_with"] > 0
    assert f["engine_ms_per_page_without"] > 0
    assert f["popular_bytes_per_page"] > 0 and f["sites_bytes_per_page"] > 0
    assert f["sites"] > 0 and r["top_phrases"][0]["docs"] >= 5
    assert q["real_hosts"] > 100 and 0 <= q["real_monster_share"] <= 1
    assert f["chunk_bytes_per_page"] > 0 and f["neighbourhood_bytes_per_page"] > 0
    assert r["chunking"]["pages"] > 250 and f["neighbourhoods"] > 0
    assert q["farm_neighbourhoods"] > 0 and q["real_neighbourhoods"] > 0
    assert 0 <= q["real_flagged_share"] <= 1
    # the review labelled farm pages: informed discovery gives a farm neighbourhood
    # contains > 0 where blind discovery at T = 10 gave none
    assert 0 < qs["review"]["labelled"] <= qs["review"]["drawn"]
    assert max(qs["informed"]["farm_badness"]) > 0 == max(q["farm_badness"])
    assert qs["informed"]["real_neighbourhoods"] == q["real_neighbourhoods"]


def test_the_baseline_takes_section_8_out_and_puts_it_back():
    from streamdet.engine import core, labelled, postings

    before = (postings.PopChanges, core.turn_away_traps, core.Engine._contributions,
              core.Engine._places, labelled.LabelledSet.add, labelled.LabelledSet.withdraw)
    with br.without_section_8():
        assert postings.PopChanges is not before[0]
        assert core.turn_away_traps([1, 2], None) == ([1, 2], [])
        assert labelled.LabelledSet.add is not before[4]
    assert (postings.PopChanges, core.turn_away_traps, core.Engine._contributions,
            core.Engine._places, labelled.LabelledSet.add,
            labelled.LabelledSet.withdraw) == before
