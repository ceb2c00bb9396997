"""`walfeed relay`: wiring of the CDC relay (settings in config.py, the loop in relay.py)."""

from __future__ import annotations

import logging

from services.cdc_relay import metrics
from services.cdc_relay.config import RelaySettings
from services.cdc_relay.relay import Relay
from services.core.settings import Settings

log = logging.getLogger(__name__)

SOURCES = ("cdc", "poll")


def run(settings: Settings, source: str) -> int:
    if source not in SOURCES:
        log.error("unknown relay source", extra={"source": source, "known": ",".join(SOURCES)})
        return 2
    relay_settings = RelaySettings.from_env()
    metrics.serve(relay_settings.metrics_port, relay_settings.metrics_host)
    if source == "poll":  # the polling outbox relay (poll.py, docs/adr/0040): no slot, no lag probe
        from services.cdc_relay import poll

        return poll.run(settings, relay_settings)
    probe = metrics.SlotLagProbe(settings.database_url, settings.slot, relay_settings.lag_interval)
    probe.start()
    try:
        return Relay(settings, relay_settings).run()
    finally:
        probe.stop()
