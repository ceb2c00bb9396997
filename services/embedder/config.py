"""Settings of `walfeed embedder` and `walfeed embed backfill`, read once at start (docs/settings.md, "embedder
consumer"); the model is WALFEED_EMBEDDER's (services/embedding/config.py).

| variable | default | meaning |
|---|---|---|
| `WALFEED_EMBED_BATCH_SIZE` | `32` | posts embedded in one call of the model (events, and backfill batches) |
| `WALFEED_EMBED_THREADS` | `1` | threads the local model runs on (ADR 0120: one per process is fastest here) |
| `WALFEED_EMBED_QUEUE_MAX_LENGTH` | `100000` | messages the embedder's queue holds; beyond, the oldest are dropped |
| `WALFEED_EMBED_IDLE_SECONDS` | `5` | seconds without a message before the embedder runs a backfill batch |
| `WALFEED_EMBED_SETTLE_SECONDS` | `60` | the backfill leaves posts younger than this to the next pass |
| `WALFEED_EMBEDDER_METRICS_PORT` | `9106` | Prometheus endpoint; `0` turns it off |
| `WALFEED_EMBEDDER_METRICS_HOST` | `127.0.0.1` | address of the metrics endpoint (unauthenticated) |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from services.core.settings import Env

METRICS_PORT: Final = 9106
# The queue's bound (docs/amqp.md): at ~200 bytes a message, 100,000 is ~20 MB of broker memory, several hours of
# posts at the rates walfeed is sized for; what is dropped the backfill embeds later.
QUEUE_MAX_LENGTH: Final = 100_000


@dataclass(frozen=True, slots=True)
class EmbedSettings:
    batch_size: int = 32
    threads: int = 1
    queue_max_length: int = QUEUE_MAX_LENGTH
    idle_seconds: float = 5.0
    settle_seconds: float = 60.0
    metrics_port: int = METRICS_PORT
    metrics_host: str = "127.0.0.1"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EmbedSettings:
        env = Env(environ)
        return cls(
            batch_size=env.int("WALFEED_EMBED_BATCH_SIZE", 32, minimum=1, maximum=1024),
            threads=env.int("WALFEED_EMBED_THREADS", 1, minimum=0, maximum=64),
            queue_max_length=env.int("WALFEED_EMBED_QUEUE_MAX_LENGTH", QUEUE_MAX_LENGTH, minimum=1,
                                     maximum=100_000_000),
            idle_seconds=env.float("WALFEED_EMBED_IDLE_SECONDS", 5.0, minimum=0.0, maximum=3600.0),
            settle_seconds=env.float("WALFEED_EMBED_SETTLE_SECONDS", 60.0, minimum=0.0, maximum=86_400.0),
            metrics_port=env.int("WALFEED_EMBEDDER_METRICS_PORT", METRICS_PORT, minimum=0, maximum=65_535),
            metrics_host=env.str("WALFEED_EMBEDDER_METRICS_HOST", "127.0.0.1"),
        )
