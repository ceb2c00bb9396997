"""Settings of `walfeed worker`, read once at start from the environment.

| variable | default | meaning |
|---|---|---|
| `WALFEED_WORKER_CONCURRENCY` | `2` | batch threads in this process (several processes may share the queue) |
| `WALFEED_WORKER_BATCH_SIZE` | `500` | most messages applied together in one transaction (docs/adr/0024) |
| `WALFEED_WORKER_LARGE_CONCURRENCY` | `1` | threads fanning out posts whose audience is larger than a chunk |
| `WALFEED_WORKER_PREFETCH` | `batch size x (concurrency + 1)` | unacked messages handed to this process |
| `WALFEED_WORKER_MAX_ATTEMPTS` | `8` | attempts before a message goes to the dead queue |
| `WALFEED_WORKER_RETRY_BASE` | `0.5` | seconds: first retry delay ceiling (doubles per attempt, full jitter) |
| `WALFEED_WORKER_RETRY_CAP` | `60` | seconds: largest retry delay |
| `WALFEED_WORKER_DEAD_MAX_LENGTH` | `100000` | dead letters kept; a full dead queue refuses more (they wait in retry) |
| `WALFEED_WORKER_METRICS_PORT` | `9102` | Prometheus endpoint; `0` turns it off |
| `WALFEED_WORKER_METRICS_HOST` | `127.0.0.1` | address the metrics endpoint binds (unauthenticated: keep it internal) |
"""

from __future__ import annotations

from services.consumer.settings import ConsumerSettings as WorkerSettings

__all__ = ["WorkerSettings"]  # the runtime's settings of a consumer, under the WALFEED_WORKER prefix (the default)
