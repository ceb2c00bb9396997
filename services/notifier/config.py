"""Settings of `walfeed notifier`, read once at start from the environment: the runtime's consumer settings
(services/consumer/settings.py) under the `WALFEED_NOTIFIER_` prefix, with defaults of its own.

| variable | default | meaning |
|---|---|---|
| `WALFEED_NOTIFIER_CONCURRENCY` | `2` | batch threads in this process (several processes may share the queue) |
| `WALFEED_NOTIFIER_BATCH_SIZE` | `100` | most messages applied together in one transaction |
| `WALFEED_NOTIFIER_PREFETCH` | `batch size x (concurrency + 1)` | unacked messages handed to this process |
| `WALFEED_NOTIFIER_MAX_ATTEMPTS` | `8` | attempts before a message goes to `{prefix}.notifier.dead` |
| `WALFEED_NOTIFIER_RETRY_BASE` | `0.5` | seconds: first retry delay ceiling (doubles per attempt, full jitter) |
| `WALFEED_NOTIFIER_RETRY_CAP` | `60` | seconds: largest retry delay |
| `WALFEED_NOTIFIER_DEAD_MAX_LENGTH` | `100000` | dead letters kept; a full dead queue refuses more |
| `WALFEED_NOTIFIER_METRICS_PORT` | `9104` | Prometheus endpoint; `0` turns it off |
| `WALFEED_NOTIFIER_METRICS_HOST` | `127.0.0.1` | address of the metrics endpoint (unauthenticated) |
| `WALFEED_NOTIFIER_AUTHOR_DELIVERIES` | `600` | deliveries one author's events may cause per window; `0`: none |
| `WALFEED_NOTIFIER_AUTHOR_WINDOW` | `3600` | seconds: that budget's fixed window (of the database clock) |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from services.consumer.settings import ConsumerSettings
from services.core.settings import Env

PREFIX: Final = "WALFEED_NOTIFIER"
# A notification batch does a few lookups per event (handles, webhooks): smaller batches than the fan-out's keep a
# transaction short; at the rates posts are written, batches stay far below it anyway.
BATCH_SIZE: Final = 100
METRICS_PORT: Final = 9104


# An author's budget (ADR 0100): one post reaches at most 10 mentioned users with 10 webhooks and an email each,
# 110 deliveries; 600 an hour is several such posts, far above what people mentioning friends cause, and bounds what
# one account can make walfeed send to others' receivers. Over it the notifications are still made, in-app only.
AUTHOR_DELIVERIES: Final = 600
AUTHOR_WINDOW: Final = 3600.0


@dataclass(frozen=True, slots=True)
class AuthorBudget:
    deliveries: int  # per author per window; 0: no budget
    window: float  # seconds


@dataclass(frozen=True, slots=True)
class NotifierSettings:
    consumer: ConsumerSettings
    author: AuthorBudget


def from_env(environ: Mapping[str, str] | None = None) -> NotifierSettings:
    env = Env(environ)
    return NotifierSettings(
        ConsumerSettings.from_env(environ, prefix=PREFIX, batch_size=BATCH_SIZE, metrics_port=METRICS_PORT,
                                large=False),
        AuthorBudget(env.int(f"{PREFIX}_AUTHOR_DELIVERIES", AUTHOR_DELIVERIES, minimum=0, maximum=100_000_000),
                     env.float(f"{PREFIX}_AUTHOR_WINDOW", AUTHOR_WINDOW, minimum=1.0, maximum=86_400.0 * 7)))
