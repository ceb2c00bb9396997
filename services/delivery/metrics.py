"""Prometheus metrics of the delivery worker. Best effort: nothing here may fail a delivery."""

from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram

log = logging.getLogger(__name__)

ATTEMPTS = Counter("walfeed_delivery_attempts_total", "Tries made, by channel and the status they left",
                   ["channel", "status"])
ATTEMPT_SECONDS = Histogram("walfeed_delivery_attempt_seconds", "Time of one try (HTTP request or SMTP session)",
                            ["channel"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
THROTTLED = Counter("walfeed_delivery_throttled_total", "Tries held back by their target's rate limit",
                    ["channel"])
HOST_DEFERRED = Counter("walfeed_delivery_host_deferred_total",
                        "Tries held back by their destination host's budget (WALFEED_DELIVERY_HOST_LIMIT)",
                        ["channel"])
DISABLED = Counter("walfeed_delivery_webhooks_disabled_total", "Webhooks disabled (410 Gone, or failing too long)")
DEAD = Counter("walfeed_delivery_dead_letters_total", "Messages sent to the channel's dead queue", ["channel"])


def attempted(channel: str, status: str, seconds: float, disabled: bool) -> None:
    try:
        ATTEMPTS.labels(channel, status).inc()
        ATTEMPT_SECONDS.labels(channel).observe(seconds)
        if disabled:
            DISABLED.inc()
    except Exception:  # metrics are best effort
        log.warning("metrics update failed", exc_info=True)
