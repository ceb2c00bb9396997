"""Relay settings, read once at start from the environment (errors name the variable).

| variable | default | meaning |
|---|---|---|
| `WALFEED_RELAY_WINDOW` | 1000 | messages unconfirmed by the broker, at most (cdc: events read a window more ahead) |
| `WALFEED_RELAY_GROUP_MAX` | 10 | fan-out events per message of the grouped exchange, at most (cdc; ADR 0095, 0115) |
| `WALFEED_RELAY_STATUS_INTERVAL` | 10 | seconds between status updates to Postgres (wal_sender_timeout is 60 s) |
| `WALFEED_RELAY_METRICS_PORT` | 9101 | Prometheus metrics port; 0 turns the endpoint off |
| `WALFEED_RELAY_METRICS_HOST` | 127.0.0.1 | address the metrics endpoint binds (unauthenticated: keep it internal) |
| `WALFEED_RELAY_STANDBY_INTERVAL` | 2 | seconds between a standby relay's attempts to take the slot |
| `WALFEED_RELAY_SHUTDOWN_TIMEOUT` | 10 | seconds to wait for outstanding confirms on SIGTERM/SIGINT |
| `WALFEED_RELAY_BLOCKED_TIMEOUT` | 60 | blocked by the broker (resource alarm) this long: reconnect |
| `WALFEED_RELAY_LAG_INTERVAL` | 5 | seconds between slot lag measurements (and outbox size measurements) |
| `WALFEED_RELAY_PRUNE_OLDER_THAN` | unset: off | prune on a timer what was confirmed this long ago (`7d`, ADR 0071) |
| `WALFEED_RELAY_PRUNE_INTERVAL` | 300 | seconds between two prunes |
| `WALFEED_RELAY_CHECKPOINT_INTERVAL` | 1 | seconds between two looks at the failover checkpoint (ADR 0091) |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from services.core import durations
from services.core.settings import METRICS_HOST, Env, SettingsError


@dataclass(frozen=True, slots=True)
class RelaySettings:
    window: int = 1000
    group_max: int = 10  # events per message of the grouped exchange, at most; 1: each alone (grouping.py, routes.py)
    status_interval: float = 10.0
    metrics_port: int = 9101
    metrics_host: str = "127.0.0.1"
    standby_interval: float = 2.0
    shutdown_timeout: float = 10.0
    blocked_timeout: float = 60.0
    lag_interval: float = 5.0
    prune_older_than: timedelta | None = None  # None: the relay does not prune
    prune_interval: float = 300.0
    checkpoint_interval: float = 1.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RelaySettings:
        env = Env(environ)
        return cls(
            window=env.int("WALFEED_RELAY_WINDOW", 1000, minimum=1, maximum=100_000),
            group_max=env.int("WALFEED_RELAY_GROUP_MAX", 10, minimum=1, maximum=500),  # a read: relay.READ_BATCH
            status_interval=env.float("WALFEED_RELAY_STATUS_INTERVAL", 10.0, minimum=0.1, maximum=30.0),
            metrics_port=env.int("WALFEED_RELAY_METRICS_PORT", 9101, minimum=0, maximum=65535),
            metrics_host=env.str("WALFEED_RELAY_METRICS_HOST", "127.0.0.1", METRICS_HOST),
            standby_interval=env.float("WALFEED_RELAY_STANDBY_INTERVAL", 2.0, minimum=0.1, maximum=300.0),
            shutdown_timeout=env.float("WALFEED_RELAY_SHUTDOWN_TIMEOUT", 10.0, minimum=0.0, maximum=600.0),
            blocked_timeout=env.float("WALFEED_RELAY_BLOCKED_TIMEOUT", 60.0, minimum=1.0, maximum=86_400.0),
            lag_interval=env.float("WALFEED_RELAY_LAG_INTERVAL", 5.0, minimum=0.5, maximum=3600.0),
            prune_older_than=_duration(env, "WALFEED_RELAY_PRUNE_OLDER_THAN"),
            prune_interval=env.float("WALFEED_RELAY_PRUNE_INTERVAL", 300.0, minimum=1.0, maximum=86_400.0),
            checkpoint_interval=env.float("WALFEED_RELAY_CHECKPOINT_INTERVAL", 1.0, minimum=0.1, maximum=3600.0),
        )


def _duration(env: Env, name: str) -> timedelta | None:
    raw = env.optional(name)
    if raw is None:
        return None
    try:
        return durations.parse(raw)
    except durations.DurationError as exc:
        raise SettingsError(f"{name}: {exc}") from None
