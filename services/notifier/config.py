"""Settings of `walfeed notifier`, read once at start from the environment: the runtime's consumer settings
(services/consumer/settings.py) under the `WALFEED_NOTIFIER_` prefix, with defaults of its own, and the author budget
(docs/settings.md, "notifier"). Each setting is declared once below (services/core/settings.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from services.consumer.settings import ConsumerSettings, declarations
from services.core.settings import Declared, Env, Float, Int

PREFIX: Final = "WALFEED_NOTIFIER"
# A notification batch does a few lookups per event (handles, webhooks): smaller batches than the fan-out's keep a
# transaction short; at the rates posts are written, batches stay far below it anyway.
BATCH_SIZE: Final = 100
METRICS_PORT: Final = 9104
CONSUMER: Final = declarations(PREFIX, batch_size=BATCH_SIZE, metrics_port=METRICS_PORT)

# An author's budget (ADR 0100): one post reaches at most 10 mentioned users with 10 webhooks and an email each,
# 110 deliveries; 600 an hour is several such posts, far above what people mentioning friends cause, and bounds what
# one account can make walfeed send to others' receivers. Over it the notifications are still made, in-app only.
AUTHOR_DELIVERIES: Final = Int(
    f"{PREFIX}_AUTHOR_DELIVERIES", 600,
    "webhook and email deliveries the events of one author (a post's author, a follower) may cause per window, all "
    "notifiers together; past it the notifications are in-app only (ADR 0100); `0`: no budget",
    minimum=0, maximum=100_000_000)
AUTHOR_WINDOW: Final = Float(f"{PREFIX}_AUTHOR_WINDOW", 3600.0,
                             "seconds: the author budget's fixed window, of the database clock", minimum=1.0,
                             maximum=86_400.0 * 7)
SETTINGS: Final[tuple[Declared, ...]] = (*CONSUMER.settings, AUTHOR_DELIVERIES, AUTHOR_WINDOW)


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
    return NotifierSettings(ConsumerSettings.read(CONSUMER, environ),
                            AuthorBudget(AUTHOR_DELIVERIES.read(env), AUTHOR_WINDOW.read(env)))
