"""loadtest/bench_review.py end to end at smoke size: the desk built, served and asked
every kind of request over HTTP; its figures are there (no timing is judged)."""

from __future__ import annotations

import json

from loadtest import bench_review as br


def test_smoke_run_asks_every_request_and_reports_it(tmp_path):
    out = tmp_path / "r.json"
    assert br.main(["--smoke", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    f, req = r["figures"], r["requests"]
    assert f["documents"] > 300 and f["quilts"] > 0 and r["events"] > 0
    kinds = {"list_first_html", "list_domain_api", "list_unlabelled_html", "list_deep_api",
             "page_html_first", "page_api_again", "sites", "clusters", "precision",
             "label_write"}
    assert kinds <= set(req)
    assert all(s["n"] > 0 and 0 < s["median_ms"] <= s["p95_ms"] <= s["max_ms"]
               for s in req.values())
    assert r["status"]["labels"] == req["label_write"]["n"]  # every write was recorded
    assert f["page_view_p95_ms"] == max(req["page_html_first"]["p95_ms"],
                                        req["page_api_first"]["p95_ms"])
