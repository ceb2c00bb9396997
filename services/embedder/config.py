"""Settings of `walfeed embedder` and `walfeed embed backfill`, read once at start (docs/settings.md, "embedder");
the model is WALFEED_EMBEDDER's (services/core/embedding/config.py). Each setting is declared once below
(services/core/settings.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from services.core.settings import METRICS_HOST as HOST_PATTERN
from services.core.settings import Declared, Env, Float, Int, Str

BATCH_SIZE: Final = Int("WALFEED_EMBED_BATCH_SIZE", 32,
                        "posts embedded in one call of the model (`--batch-size` overrides it for a backfill)",
                        minimum=1, maximum=1024)
THREADS: Final = Int("WALFEED_EMBED_THREADS", 1,
                     "threads the local model runs on (ADR 0120: one per process is fastest here); `0`: every core",
                     minimum=0, maximum=64)
# The queue's bound (docs/amqp.md): at ~200 bytes a message, 100,000 is ~20 MB of broker memory, several hours of
# posts at the rates walfeed is sized for; what is dropped the backfill embeds later.
QUEUE_MAX_LENGTH: Final = Int(
    "WALFEED_EMBED_QUEUE_MAX_LENGTH", 100_000,
    "messages `{prefix}.embedder` holds; beyond, the oldest are dropped (`drop-head`): the backfill embeds their "
    "posts later (docs/amqp.md)", minimum=1, maximum=100_000_000)
IDLE_SECONDS: Final = Float("WALFEED_EMBED_IDLE_SECONDS", 5.0,
                            "seconds without a message before the consumer runs a backfill batch", minimum=0.0,
                            maximum=3600.0)
SETTLE_SECONDS: Final = Float(
    "WALFEED_EMBED_SETTLE_SECONDS", 60.0,
    "a backfill pass leaves posts younger than this to the next one (their transaction may still be open)",
    minimum=0.0, maximum=86_400.0)
METRICS_PORT: Final = Int("WALFEED_EMBEDDER_METRICS_PORT", 9106,
                          "Prometheus endpoint (`walfeed_embedder_*`); `0` turns it off", minimum=0, maximum=65_535)
METRICS_HOST: Final = Str("WALFEED_EMBEDDER_METRICS_HOST", "127.0.0.1",
                          "address of the metrics endpoint (unauthenticated)", HOST_PATTERN)
SETTINGS: Final[tuple[Declared, ...]] = (BATCH_SIZE, THREADS, QUEUE_MAX_LENGTH, IDLE_SECONDS, SETTLE_SECONDS,
                                         METRICS_PORT, METRICS_HOST)


@dataclass(frozen=True, slots=True)
class EmbedSettings:
    batch_size: int = BATCH_SIZE.default_value()
    threads: int = THREADS.default_value()
    queue_max_length: int = QUEUE_MAX_LENGTH.default_value()
    idle_seconds: float = IDLE_SECONDS.default_value()
    settle_seconds: float = SETTLE_SECONDS.default_value()
    metrics_port: int = METRICS_PORT.default_value()
    metrics_host: str = METRICS_HOST.default

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EmbedSettings:
        env = Env(environ)
        return cls(BATCH_SIZE.read(env), THREADS.read(env), QUEUE_MAX_LENGTH.read(env), IDLE_SECONDS.read(env),
                   SETTLE_SECONDS.read(env), METRICS_PORT.read(env), METRICS_HOST.read(env))
