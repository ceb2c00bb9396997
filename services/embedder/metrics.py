"""The embedder's Prometheus metrics (`walfeed_embedder_*`, WALFEED_EMBEDDER_METRICS_PORT; the alert in
deploy/prometheus/alerts.yml)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

EMBEDDED: Final = Counter("walfeed_embedder_posts_embedded", "Post vectors written, by how they came",
                          ["source"])  # event, backfill
FAILURES: Final = Counter("walfeed_embedder_failures", "Batches the model or the database failed, by kind "
                          "(timeout, connection, http-status, dimension, answer, model, database)", ["kind"])
TOMBSTONED: Final = Counter("walfeed_embedder_posts_tombstoned", "Vectors of deleted posts made tombstones")
IGNORED: Final = Counter("walfeed_embedder_messages_ignored", "Messages acked without effect: malformed, or "
                         "of another type")
SECONDS: Final = Histogram("walfeed_embedder_batch_seconds", "Time to embed and write one batch",
                           buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
LAST_EMBEDDED: Final = Gauge("walfeed_embedder_last_embedded_timestamp_seconds",
                             "When a vector was last written (Unix time)")
BACKFILL_POSITION: Final = Gauge("walfeed_embedder_backfill_position", "The backfill's position (a post id)")
MODEL_COMPLETE: Final = Gauge("walfeed_embedder_model_complete", "1 once a backfill pass covered every post")
