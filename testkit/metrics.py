"""A process's Prometheus /metrics as the tests read it: fetched over HTTP, parsed by prometheus_client's parser."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> str:
    """The text a /metrics endpoint serves; an error status raises."""
    reply = httpx.get(url, timeout=5)
    reply.raise_for_status()
    return reply.text


def samples(text: str) -> dict[str, float]:
    """Every sample by name and labels (sorted by label name): {'name{label="v"}': value}."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            found[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return found


def labelled(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples named `name`, each as (its labels, its value)."""
    return [(s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name]


def total(text: str, name: str, labels: Mapping[str, str]) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    return sum(value for found, value in labelled(text, name) if labels.items() <= found.items())
