"""Relay settings, read once at start from the environment (docs/settings.md, "relay"); errors name the variable.

Each setting is declared once below (services/core/settings.py): its variable, default, bounds and meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from services.cdc_relay import poll_policy
from services.core.settings import BIND_ADDRESS, Declared, Env, Float, Int, OptionalDuration, Str

WINDOW: Final = Int(
    "WALFEED_RELAY_WINDOW", 1000,
    "messages unconfirmed by the broker, at most (the cdc source reads a window of events more ahead)",
    minimum=1, maximum=100_000)
GROUP_MAX: Final = Int(  # its bound: a read of the slot (relay.READ_BATCH); grouping.py, routes.py
    "WALFEED_RELAY_GROUP_MAX", 10,
    "events per message of the grouped exchange, at most, for the cdc source: consecutive events of one fan-out type "
    "(`post.*`, `follow.*`) read together go to walfeed's fan-out worker and notifier as one message "
    "(docs/events.md \"Groups\", ADR 0095, 0115), never waiting for more. The events exchange carries every event "
    "alone whatever the value, so no consumer that is not walfeed's is affected. 10 measured best for 10-follower "
    "fan-out (docs/results.md, \"The default groups events\"); 1: one event per message there too "
    "(slower); keep it well below `WALFEED_WORKER_BATCH_SIZE`", minimum=1, maximum=500)
STATUS_INTERVAL: Final = Float("WALFEED_RELAY_STATUS_INTERVAL", 10.0,
                               "seconds between status updates to Postgres (wal_sender_timeout is 60 s)",
                               minimum=0.1, maximum=30.0)
METRICS_PORT: Final = Int("WALFEED_RELAY_METRICS_PORT", 9101, "Prometheus metrics port; 0 turns the endpoint off",
                          minimum=0, maximum=65_535)
METRICS_HOST: Final = Str("WALFEED_RELAY_METRICS_HOST", "127.0.0.1",
                          "address the metrics endpoint binds (unauthenticated: keep it internal)", BIND_ADDRESS,
                          allowed="an address or host name")
STANDBY_INTERVAL: Final = Float("WALFEED_RELAY_STANDBY_INTERVAL", 2.0,
                                "seconds between a standby relay's attempts to take the slot",
                                minimum=0.1, maximum=300.0)
SHUTDOWN_TIMEOUT: Final = Float("WALFEED_RELAY_SHUTDOWN_TIMEOUT", 10.0,
                                "seconds to wait for outstanding confirms on SIGTERM/SIGINT", minimum=0.0,
                                maximum=600.0)
BLOCKED_TIMEOUT: Final = Float("WALFEED_RELAY_BLOCKED_TIMEOUT", 60.0,
                               "blocked by the broker (resource alarm) this long: reconnect", minimum=1.0,
                               maximum=86_400.0)
LAG_INTERVAL: Final = Float("WALFEED_RELAY_LAG_INTERVAL", 5.0,
                            "seconds between slot lag measurements (and outbox size measurements)", minimum=0.5,
                            maximum=3600.0)
PRUNE_OLDER_THAN: Final = OptionalDuration(
    "WALFEED_RELAY_PRUNE_OLDER_THAN",
    "prune on a timer outbox rows and processed records whose events were confirmed this long ago (`7d`; "
    "docs/operations.md, ADR 0071)")
PRUNE_INTERVAL: Final = Float("WALFEED_RELAY_PRUNE_INTERVAL", 300.0, "seconds between two prunes", minimum=1.0,
                              maximum=86_400.0)
CHECKPOINT_INTERVAL: Final = Float(
    "WALFEED_RELAY_CHECKPOINT_INTERVAL", 1.0,
    "seconds between two looks at the failover checkpoint: the position the broker confirmed, kept as a replicated "
    "row so a promoted standby knows which outbox rows to republish; duplicates after a failover grow with it "
    "(ADR 0091)", minimum=0.1, maximum=3600.0)
POLL_SETTINGS: Final = poll_policy.SETTINGS  # `walfeed relay --source poll`'s own
SETTINGS: Final[tuple[Declared, ...]] = (
    WINDOW, GROUP_MAX, STATUS_INTERVAL, METRICS_PORT, METRICS_HOST, STANDBY_INTERVAL, SHUTDOWN_TIMEOUT,
    BLOCKED_TIMEOUT, LAG_INTERVAL, PRUNE_OLDER_THAN, PRUNE_INTERVAL, CHECKPOINT_INTERVAL)


@dataclass(frozen=True, slots=True)
class RelaySettings:
    window: int = WINDOW.default_value()
    group_max: int = GROUP_MAX.default_value()  # events per message of the grouped exchange; 1: each alone
    status_interval: float = STATUS_INTERVAL.default_value()
    metrics_port: int = METRICS_PORT.default_value()
    metrics_host: str = METRICS_HOST.default
    standby_interval: float = STANDBY_INTERVAL.default_value()
    shutdown_timeout: float = SHUTDOWN_TIMEOUT.default_value()
    blocked_timeout: float = BLOCKED_TIMEOUT.default_value()
    lag_interval: float = LAG_INTERVAL.default_value()
    prune_older_than: timedelta | None = None  # None: the relay does not prune
    prune_interval: float = PRUNE_INTERVAL.default_value()
    checkpoint_interval: float = CHECKPOINT_INTERVAL.default_value()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RelaySettings:
        env = Env(environ)
        return cls(
            window=WINDOW.read(env),
            group_max=GROUP_MAX.read(env),
            status_interval=STATUS_INTERVAL.read(env),
            metrics_port=METRICS_PORT.read(env),
            metrics_host=METRICS_HOST.read(env),
            standby_interval=STANDBY_INTERVAL.read(env),
            shutdown_timeout=SHUTDOWN_TIMEOUT.read(env),
            blocked_timeout=BLOCKED_TIMEOUT.read(env),
            lag_interval=LAG_INTERVAL.read(env),
            prune_older_than=PRUNE_OLDER_THAN.read(env),
            prune_interval=PRUNE_INTERVAL.read(env),
            checkpoint_interval=CHECKPOINT_INTERVAL.read(env),
        )
