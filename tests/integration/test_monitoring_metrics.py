"""Every metric name deploy/prometheus/alerts.yml and deploy/grafana/walfeed.json use is served by a real process:
the api, the relay, the worker and the embedder started as `walfeed` subprocesses, and RabbitMQ's
rabbitmq_prometheus plugin (enabled by scripts/setup-infra.sh), scraped the way deploy/prometheus/prometheus.yml
scrapes them."""

from __future__ import annotations

import functools
import re
from typing import Final

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testkit import metrics
from testkit.processes import Processes, free_port
from testkit.waiting import eventually
from tests.unit.environment import ROOT
from tests.unit.test_monitoring import alert_rules, dashboard_exprs

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

# The series a family of each type exposes (a labelled family with no child yet has no sample, only its type).
_SERIES: Final = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
                  "gauge": ("",), "summary": ("_count", "_sum", "_created"), "untyped": ("",), "info": ("_info",)}
_NAME: Final = re.compile(r"\b((?:walfeed|rabbitmq)_[A-Za-z0-9_]+)\b")
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"')


def served(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in _SERIES.get(family.type, ("",))}
        names |= {sample.name for sample in family.samples}
    return names


def used() -> set[str]:
    exprs = [rule["expr"] for rule in alert_rules()] + dashboard_exprs()
    return {name for expr in exprs for name in _NAME.findall(_STRING.sub('""', expr))}


def _rabbitmq_url() -> str:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "rabbitmq")
    query = "&".join(f"{key}={value}" for key, values in job["params"].items() for value in values)
    return f"http://127.0.0.1:15692{job['metrics_path']}?{query}"


def _served_at(url: str) -> set[str]:
    return served(metrics.scrape(url))


def test_every_metric_the_alerts_and_the_dashboard_use_is_served(processes: Processes) -> None:
    api_port, relay_port, worker_port, embedder_port = free_port(), free_port(), free_port(), free_port()
    processes.start("api", "api", "--port", str(api_port))
    processes.start("relay", "relay", env={"WALFEED_RELAY_METRICS_PORT": str(relay_port),
                                           "WALFEED_RELAY_LAG_INTERVAL": "0.5"})
    processes.start("worker", "worker", env={"WALFEED_WORKER_METRICS_PORT": str(worker_port)})
    processes.start("embedder", "embedder", env={"WALFEED_EMBEDDER_METRICS_PORT": str(embedder_port)})
    endpoints = {"api": f"http://127.0.0.1:{api_port}/metrics", "relay": f"http://127.0.0.1:{relay_port}/metrics",
                 "worker": f"http://127.0.0.1:{worker_port}/metrics",
                 "embedder": f"http://127.0.0.1:{embedder_port}/metrics", "rabbitmq": _rabbitmq_url()}
    # One request first: the api's labelled request metrics have their first sample only once one was counted.
    eventually(lambda: httpx.get(f"http://127.0.0.1:{api_port}/healthz").status_code == 200, timeout=60,
               what="api up")
    names: dict[str, set[str]] = {}
    for process, url in endpoints.items():
        names[process] = eventually(functools.partial(_served_at, url), timeout=60, what=f"{process} /metrics")

    wanted = used()
    assert {n.split("_")[1] for n in wanted if n.startswith("walfeed_")} == {"api", "relay", "worker", "embedder"}
    assert any(n.startswith("rabbitmq_") for n in wanted)
    everything = set().union(*names.values())
    assert wanted <= everything, f"used but served by no process: {sorted(wanted - everything)}"
    # Each family from the process it is named after.
    for name in wanted:
        owner = "rabbitmq" if name.startswith("rabbitmq_") else name.split("_")[1]
        assert name in names[owner], f"{name} is not on the {owner}'s /metrics"

    # The operations series carry values: a post's commit-to-timeline delay, the slot's retained WAL.
    base = f"http://127.0.0.1:{api_port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=30, what="api ready")
    token = httpx.post(f"{base}/v1/users", json={"handle": "metrics"}).json()["token"]
    created = httpx.post(f"{base}/v1/posts", json={"body": "measured"}, headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 201, created.text
    eventually(lambda: _value(endpoints["worker"], "walfeed_worker_event_delay_seconds_count",
                              {"type": "post.created"}) >= 1, timeout=30, what="the delay of the post observed")
    # the probe samples the slot every few seconds: retained WAL can read 0 at one tick (restart point at the end)
    eventually(lambda: _value(endpoints["relay"], "walfeed_relay_slot_retained_bytes", {}) > 0, timeout=30,
               what="retained WAL reported for the slot")


def _value(url: str, name: str, labels: dict[str, str]) -> float:
    return metrics.total(metrics.scrape(url), name, labels)
