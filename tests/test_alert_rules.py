"""deploy/prometheus/rules/streamdet.yml: `promtool check rules` and `promtool test
rules` (deploy/prometheus/tests/streamdet_test.yml) pass; every alert the issue asks for is
there with a severity and a summary, description and runbook; the unit tests have, for
each alert, a case where it fires and one where it does not, and they fail when an alert
can never fire; every rule reads only metrics the code exports.

promtool comes with Prometheus (`apt-get install -y --no-install-recommends prometheus`);
a missing promtool is a failure, never a skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from streamdet.adapters.metrics import Metrics

from .test_dashboard import exported_series, names_in, unknown_names

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "rules" / "streamdet.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tests" / "streamdet_test.yml"
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"

ALERTS = {"StreamdetWorkerDown", "StreamdetLagGrowing", "StreamdetDeadLettersSpiking",
          "StreamdetNoPages", "StreamdetLatencySLOBurn", "StreamdetWorkerRejoining",
          "StreamdetWorkerSaturated"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found on PATH: install Prometheus "
                    "(`apt-get install -y --no-install-recommends prometheus`)")
    return path


def run_promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [r for g in doc["groups"] for r in g["rules"]]


def alerts() -> list[dict]:
    return [r for r in rules() if "alert" in r]


def test_promtool_check_rules():
    proc = run_promtool("check", "rules", RULES)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_promtool_test_rules():
    proc = run_promtool("test", "rules", RULE_TESTS)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_the_alerts_of_the_issue_with_severity_and_annotations():
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert [g["name"] for g in doc["groups"]] == ["streamdet"]
    assert {r["alert"] for r in alerts()} == ALERTS
    for r in alerts():
        assert r["labels"]["severity"] in {"page", "ticket"}, r["alert"]
        assert {"summary", "description", "runbook"} <= set(r["annotations"]), r["alert"]
        assert r.get("for"), f"{r['alert']} has no `for`: one bad evaluation would fire it"
    by_name = {}
    for r in alerts():
        by_name.setdefault(r["alert"], []).append(r)
    assert by_name["StreamdetWorkerDown"][0]["for"] == "1m"
    assert by_name["StreamdetNoPages"][0]["for"] == "10m"
    assert "[10m]" in by_name["StreamdetNoPages"][0]["expr"]
    # the latency SLO: fast burn (page) 14.4x over 1h and 5m, slow burn (ticket) 6x over
    # 6h and 30m, on the recording rules of the error ratio
    burns = {r["labels"]["burn"]: r for r in by_name["StreamdetLatencySLOBurn"]}
    assert burns["fast"]["labels"]["severity"] == "page"
    assert burns["slow"]["labels"]["severity"] == "ticket"
    for burn, factor, windows in (("fast", "14.4", ("1h", "5m")), ("slow", "6", ("6h", "30m"))):
        expr = burns[burn]["expr"]
        assert f"({factor} * 0.01)" in expr
        for w in windows:
            assert f"streamdet:fetch_to_event_slo_errors:ratio_rate{w} >" in expr


def test_the_slo_bucket_is_the_one_the_client_renders():
    """The error ratio reads the le="1.0" bucket: the label the Python client really
    writes for the 1 s bound (not "1" nor "1.000")."""
    reg = CollectorRegistry()
    Metrics(reg).latency.observe(0.5)
    text = generate_latest(reg).decode()
    assert 'streamdet_fetch_to_event_seconds_bucket{le="1.0"} 1.0' in text
    les = set()
    for r in rules():
        les |= set(re.findall(r'streamdet_fetch_to_event_seconds_bucket\{le="([^"]+)"\}',
                              r["expr"]))
    assert les == {"1.0"}
    for le in les:
        assert f'streamdet_fetch_to_event_seconds_bucket{{le="{le}"}}' in text


def test_rules_read_only_exported_metrics():
    problems = [f"{r.get('alert') or r.get('record')}: {sorted(bad)}"
                for r in rules() if (bad := unknown_names(r["expr"]))]
    assert not problems, "rules read metrics the code does not export:\n" + "\n".join(problems)
    series = exported_series()
    read = {series.get(n) for r in rules() for n in names_in(r["expr"])}
    for needed in ("streamdet_worker_up", "streamdet_consumer_lag_records",
                   "streamdet_dead_letters_total", "streamdet_pages_total",
                   "streamdet_fetch_to_event_seconds"):
        assert needed in read


def test_prometheus_scrape_job_matches_the_worker_down_alert():
    """StreamdetWorkerDown matches `up{job=~"streamdet.*"}`: the scrape job of the workers
    in deploy/prometheus/prometheus.yml must be one of those jobs, and its rule_files must
    load this file where the compose file mounts it."""
    conf = yaml.safe_load(PROMETHEUS_YML.read_text(encoding="utf-8"))
    jobs = [c["job_name"] for c in conf["scrape_configs"]]
    expr = next(r["expr"] for r in alerts() if r["alert"] == "StreamdetWorkerDown")
    pattern = re.search(r'up\{job=~"([^"]+)"\}', expr).group(1)
    assert any(re.fullmatch(pattern, j) for j in jobs if j != "prometheus"), jobs
    assert not re.fullmatch(pattern, "prometheus")
    assert "/etc/prometheus/rules/*.yml" in conf["rule_files"]


def test_every_alert_has_a_firing_and_a_quiet_case():
    doc = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert ALERTS <= fires, f"no case where these fire: {sorted(ALERTS - fires)}"
    assert ALERTS <= quiet, f"no case where these stay quiet: {sorted(ALERTS - quiet)}"
    burns = {tuple(sorted(a["exp_labels"].items()))
             for case in doc["tests"] for check in case.get("alert_rule_test", [])
             if check["alertname"] == "StreamdetLatencySLOBurn"
             for a in check.get("exp_alerts") or []}
    assert {dict(b)["burn"] for b in burns} == {"fast", "slow"}


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_unit_tests_fail_when_an_alert_cannot_fire(alert, tmp_path):
    """The unit tests have teeth: with this alert's expression replaced by one that never
    fires, `promtool test rules` fails."""
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in doc["groups"]:
        for r in group["rules"]:
            if r.get("alert") == alert:
                r["expr"] = "vector(1) == 0"
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copy(RULE_TESTS, tmp_path / "tests" / RULE_TESTS.name)
    proc = run_promtool("test", "rules", tmp_path / "tests" / RULE_TESTS.name)
    assert proc.returncode != 0, f"promtool test rules passes although {alert} never fires"
    assert f"alertname: {alert}," in proc.stdout + proc.stderr
