"""`walfeed embed backfill`: vectors for every live post that has none of the model (services/embedder/backfill.py,
docs/adr/0123), online and resumable, printing its progress. Runs as the embedder's role."""

from __future__ import annotations

import sys

import psycopg

from services.core.settings import Settings
from services.embedder import backfill
from services.embedder.config import EmbedSettings
from services.embedding import config as embedder_config
from services.embedding.protocol import EmbedderUnavailable


def run(settings: Settings, *, from_start: bool, batch_size: int | None) -> int:
    if batch_size is not None and not 1 <= batch_size <= 1024:
        print(f"walfeed embed backfill: --batch-size {batch_size} is invalid: expected 1..1024", file=sys.stderr)
        return 2
    embed = EmbedSettings.from_env()
    chosen = embedder_config.EmbedderSettings.from_env()
    try:
        embedder = embedder_config.build(chosen, embed.threads)
    except EmbedderUnavailable as exc:
        print(f"walfeed embed backfill: the embedder cannot start: {exc.reason}", file=sys.stderr)
        return 1
    if embedder is None:
        print("walfeed embed backfill: WALFEED_EMBEDDER=off: there is no model to embed with", file=sys.stderr)
        return 2

    def show(p: backfill.Progress) -> None:
        print(f"embed backfill: {p.model}: post {p.position} of {p.horizon}, {p.embedded} embedded"
              + (", complete" if p.complete else ""), flush=True)

    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        try:
            done = backfill.run_pass(conn, embedder, settle=embed.settle_seconds,
                                     batch=batch_size or embed.batch_size, from_start=from_start, progress=show)
        except EmbedderUnavailable as exc:
            print(f"walfeed embed backfill: the model failed ({exc.reason}); run it again to resume",
                  file=sys.stderr)
            return 1
    print(f"embed backfill: {done.model}: {done.embedded} embedded, every live post up to {done.horizon} has a "
          "vector; search uses this model" + ("" if done.complete else " once complete"), flush=True)
    return 0
