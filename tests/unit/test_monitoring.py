"""deploy/prometheus and deploy/grafana: the rules pass `promtool check rules` and the rule unit tests, the scrape
config `promtool check config`; every alert has a severity and a runbook section; the dashboard has the panels
operators look for, on the provisioned datasource. That every metric name exists in the processes' /metrics is
tests/integration/test_monitoring_metrics.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.environment import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
GRAFANA = ROOT / "deploy" / "grafana"
RUNBOOK = ROOT / "docs" / "runbook.md"


def _promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/setup-infra.sh installs it (from Debian's prometheus package)"
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((GRAFANA / "walfeed.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_promtool_accepts_the_rules_and_the_scrape_config() -> None:
    rules = _promtool("check", "rules", "alerts.yml")
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = _promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


def test_the_alerts_fire_on_their_series_in_promtools_rule_tests() -> None:
    tested = _promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    (tmp_path / "bad.yml").write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: rate(x[5m]\n")
    assert _promtool("check", "rules", "bad.yml", cwd=tmp_path).returncode != 0


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section() -> None:
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", RUNBOOK.read_text(), re.MULTILINE)}
    rules = alert_rules()
    assert len(rules) >= 15
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/runbook.md#{rule['alert'].lower()}", rule["alert"]
        assert url.split("#")[1] in anchors, f"docs/runbook.md has no section {rule['alert']}"


@pytest.mark.parametrize("topic", ["slot_lag", "slot_retained", "in_flight", "unroutable", "dead_letters",
                                   "queue_consumers", "retries", "api_requests_total", "api_request_seconds"])
def test_the_alerts_cover_what_issue_16_asks(topic: str) -> None:
    assert any(topic in rule["expr"] for rule in alert_rules()), topic


def test_the_scrape_jobs_are_the_ones_the_alerts_name() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    named = {job for rule in alert_rules() for job in re.findall(r'job="([^"]+)"', rule["expr"])}
    assert named and named <= jobs


def test_the_dashboard_shows_every_stage_on_the_provisioned_datasource() -> None:
    dashboard = json.loads((GRAFANA / "walfeed.json").read_text())
    provisioned = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uid = provisioned["datasources"][0]["uid"]
    titles = " | ".join(panel["title"].lower() for panel in dashboard["panels"])
    for wanted in ("write rate", "slot lag", "confirm latency", "queue depths", "fan-out rate", "end-to-end delay",
                   "api latency"):
        assert wanted in titles, wanted
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == uid and panel["targets"], panel["title"]
        assert all(target["datasource"]["uid"] == uid for target in panel["targets"])


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """The dashboard's queries are PromQL: as recording rules, promtool parses each one."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"walfeed:dashboard_query_{i}", "expr": expr} for i, expr in enumerate(dashboard_exprs())]}]}
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    parsed = _promtool("check", "rules", "dashboard.yml", cwd=tmp_path)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
