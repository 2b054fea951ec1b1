"""deploy/grafana/dashboards/streamdet.json: every query of the dashboard names
only metrics the code really exports (streamdet.adapters.metrics) or recording rules of
deploy/prometheus/rules/streamdet.yml, it uses the provisioned Prometheus datasource, and
it has panels for each thing the issue asks to see.

Grafana cannot run here; tests/test_prometheus_scrape.py runs every query of the dashboard
on a real Prometheus instead. The PromQL helpers below are also used by test_alert_rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from streamdet.adapters.metrics import METRICS, Metrics

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "streamdet.json"
RULES = ROOT / "deploy" / "prometheus" / "rules" / "streamdet.yml"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources"

# --- PromQL -------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def names_in(expr: str) -> set[str]:
    """The streamdet series names an expression reads: identifiers (outside string literals,
    so label values do not count) starting with `streamdet_` (exported series) or
    `streamdet:` (recording rules)."""
    bare = _STRING.sub('""', expr)
    return {t for t in _IDENT.findall(bare) if t.startswith(("streamdet_", "streamdet:"))}


def exported_series() -> dict[str, str]:
    """Every series name a scrape of the code's metrics can show, mapped to its entry in
    METRICS: a counter's `_total`, a histogram's `_bucket`, `_count` and `_sum`, a gauge's
    own name. Derived from the metric types, so `streamdet_pages_total_bucket` or
    `streamdet_state_documents_count` are not accepted."""
    reg = CollectorRegistry()
    Metrics(reg)
    out: dict[str, str] = {}
    for family in reg.collect():
        if family.type == "counter":
            out[family.name + "_total"] = family.name + "_total"
        elif family.type == "histogram":
            for suffix in ("_bucket", "_count", "_sum"):
                out[family.name + suffix] = family.name
        else:
            out[family.name] = family.name
    return {series: base for series, base in out.items() if base in METRICS}


def recording_rules() -> set[str]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}


def unknown_names(expr: str) -> set[str]:
    """Names in expr that are neither exported by the code nor recorded by the rules."""
    known = set(exported_series()) | recording_rules()
    return names_in(expr) - known


# --- the dashboard ------------------------------------------------------------------------


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def all_panels(node: dict | None = None) -> Iterator[dict]:
    """Every panel, rows' nested panels (collapsed rows) included."""
    for panel in (node or dashboard()).get("panels", []):
        yield panel
        yield from all_panels(panel)


def exprs_of(panel: dict) -> list[str]:
    return [t["expr"] for t in panel.get("targets", []) if t.get("expr")]


def all_queries(dash: dict | None = None) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every templating query."""
    dash = dash or dashboard()
    out = [(f"panel {p.get('title')!r}", e) for p in all_panels(dash) for e in exprs_of(p)]
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        for text in filter(None, [q, var.get("definition")]):
            out.append((f"variable {var.get('name')!r}", text))
    return out


def provisioned_uid() -> str:
    """The uid of the Prometheus datasource Grafana is provisioned with."""
    uids = []
    for path in sorted(DATASOURCES.glob("*.y*ml")):
        for ds in yaml.safe_load(path.read_text(encoding="utf-8")).get("datasources") or []:
            if ds.get("type") == "prometheus":
                uids.append(ds["uid"])
    assert len(uids) == 1, f"expected one provisioned Prometheus datasource, found {uids}"
    return uids[0]


# --- tests --------------------------------------------------------------------------------


def test_names_in_reads_series_names_only():
    expr = ('histogram_quantile(0.99, sum by (le) (rate(streamdet_fetch_to_event_seconds_bucket'
            '{job=~"$job", reason="streamdet_not_a_metric"}[$__rate_interval]))) '
            '/ on (job) streamdet:pages:rate5m + streamdet_state_documents')
    assert names_in(expr) == {"streamdet_fetch_to_event_seconds_bucket",
                              "streamdet:pages:rate5m", "streamdet_state_documents"}
    series = exported_series()
    assert series["streamdet_fetch_to_event_seconds_bucket"] == "streamdet_fetch_to_event_seconds"
    assert series["streamdet_pages_total"] == "streamdet_pages_total"
    assert set(series.values()) == set(METRICS)  # every METRICS entry is a real metric
    assert unknown_names("rate(streamdet_pages_total_bucket[5m]) + streamdet_nope") == {
        "streamdet_pages_total_bucket", "streamdet_nope"}
    assert unknown_names("streamdet:no_such:rule") == {"streamdet:no_such:rule"}


def test_dashboard_is_a_provisionable_grafana_dashboard():
    dash = dashboard()
    assert dash["uid"] == "streamdet" and dash["title"]
    assert dash.get("id") is None  # provisioned: Grafana assigns the id
    assert 36 <= dash["schemaVersion"] <= 41
    panels = list(all_panels(dash))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["type"] in {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap"}
        assert p.get("title") and p.get("targets"), p
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), f"duplicate refId in {p['title']!r}"
    # visible panels do not overlap
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_every_query_uses_the_provisioned_datasource():
    uid = provisioned_uid()
    dash = dashboard()
    for p in all_panels(dash):
        for node in [p, *p.get("targets", [])]:
            ds = node.get("datasource")
            if ds is not None:
                assert ds == {"type": "prometheus", "uid": uid}, (p["title"], ds)
        if p["type"] != "row":
            assert p.get("datasource"), f"panel {p['title']!r} has no datasource"
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"] == {"type": "prometheus", "uid": uid}, var["name"]


def test_every_query_names_a_metric_the_code_exports():
    queries = all_queries()
    assert len(queries) >= 30
    problems = [f"{where}: {sorted(bad)} in {expr}"
                for where, expr in queries if (bad := unknown_names(expr))]
    assert not problems, "queries name metrics the code does not export:\n" + "\n".join(problems)
    for where, expr in queries:  # (or Prometheus' own `up` of the workers' targets)
        assert names_in(expr) or re.search(r"\bup\{", expr), f"{where} reads nothing: {expr}"


def test_every_exported_metric_is_on_the_dashboard():
    series = exported_series()
    used = {series.get(n) for _, e in all_queries() for n in names_in(e)}
    shown_by_rules = set()
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    recorded = {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"]
                if "record" in r}
    for _, e in all_queries():
        for n in names_in(e) & set(recorded):
            shown_by_rules |= {series.get(m) for m in names_in(recorded[n])}
    missing = set(METRICS) - used - shown_by_rules
    assert not missing, f"exported but on no panel: {sorted(missing)}"


def _uses(*names: str, pattern: str = "") -> Callable[[dict], bool]:
    def check(panel: dict) -> bool:
        text = "\n".join(exprs_of(panel))
        found = set().union(*(names_in(e) for e in exprs_of(panel))) if text else set()
        return set(names) <= found and re.search(pattern, text, re.S) is not None
    return check


def _quantiles(metric: str, *qs: str, by: str = "le") -> Callable[[dict], bool]:
    def check(panel: dict) -> bool:
        text = "\n".join(exprs_of(panel))
        return all(re.search(rf"histogram_quantile\(\s*{re.escape(q)}\s*,\s*sum by \({by}\)"
                             rf"\s*\(rate\({metric}_bucket", text) for q in qs)
    return check


def _unit(unit: str) -> Callable[[dict], bool]:
    return lambda p: p.get("fieldConfig", {}).get("defaults", {}).get("unit") == unit


TOPICS: dict[str, list[Callable[[dict], bool]]] = {
    "throughput: pages/s": [_uses("streamdet_pages_total", pattern=r"rate\("), _unit("reqps")],
    "throughput: bytes/s": [_uses("streamdet_input_bytes_total", pattern=r"rate\("),
                            _unit("Bps")],
    "latency percentiles p50/p90/p99": [
        _quantiles("streamdet_fetch_to_event_seconds", "0.5", "0.9", "0.99"), _unit("s")],
    "latency SLO burn": [_uses("streamdet:fetch_to_event_slo_errors:ratio_rate1h",
                               "streamdet:fetch_to_event_slo_errors:ratio_rate5m")],
    "consumer lag per partition": [
        _uses("streamdet_consumer_lag_records", pattern=r"by \(topic, partition\)")],
    "quilt/rescore/unquilt rate": [
        _uses("streamdet_events_total", "streamdet_pages_total", pattern=r"by \(event\)")],
    "events by kind": [_uses("streamdet_events_total", pattern=r"by \(event\)")],
    "state: documents": [_uses("streamdet_state_documents")],
    "state: postings": [_uses("streamdet_state_postings")],
    "state: disk bytes": [_uses("streamdet_state_disk_bytes"), _unit("bytes")],
    "state: writes by table": [
        _uses("streamdet_state_write_bytes_total", pattern=r"by \(table\)"), _unit("Bps")],
    "errors: dead letters by reason": [
        _uses("streamdet_dead_letters_total", pattern=r"by \(reason\)")],
    "rescoring fan-out": [_quantiles("streamdet_rescore_fanout", "0.5", "0.99")],
    "workers up": [_uses("streamdet_worker_up", pattern=r"\bup\{")],
    "rebalances": [_uses("streamdet_rebalances_total")],
    "batch time by stage": [_quantiles("streamdet_batch_seconds", "0.5", "0.99",
                                       by="stage, le")],
    "crawler traps": [_uses("streamdet_events_total", pattern=r'event="trap"')],
    "monster candidates by level": [_uses("streamdet_monster_sites", pattern=r"by \(level\)")],
    "site events": [_uses("streamdet_events_total", pattern=r'event="site"')],
    "bad neighbourhoods": [_uses("streamdet_bad_neighbourhoods")],
}


@pytest.mark.parametrize("topic", list(TOPICS))
def test_a_panel_shows(topic):
    panels = [p for p in all_panels() if p["type"] != "row"]
    matching = [p["title"] for p in panels if all(check(p) for check in TOPICS[topic])]
    assert matching, f"no panel shows {topic}"


def test_rows_group_the_panels():
    rows = [p["title"] for p in all_panels() if p["type"] == "row"]
    assert rows == ["Overview", "Throughput", "Latency", "Kafka", "Detection", "Replication",
                    "State", "Errors"]
