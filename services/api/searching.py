"""Search's parts in one api process, made in the app's lifespan: the query embedder (WALFEED_EMBEDDER, in a
thread), the vector index kept from Postgres (a background task) and the search metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry, Counter

from services.api import search_plan
from services.api.db import Pool
from services.api.query_embedding import QueryEmbedder
from services.api.search_config import SearchSettings
from services.api.search_index import SearchIndex
from services.embedding import config as embedder_config
from services.embedding.protocol import EmbedderUnavailable

log = logging.getLogger(__name__)


class Search:
    def __init__(self, settings: SearchSettings, registry: CollectorRegistry) -> None:
        self.settings = settings
        self.queries: QueryEmbedder | None = None
        self.index: SearchIndex | None = None
        self.off_reason: str | None = search_plan.EMBEDDER_OFF
        self._task: asyncio.Task[None] | None = None
        self._registry = registry
        self.searches = Counter("walfeed_api_searches", "Searches answered, by the mode answered and why the vector "
                                "half did not answer (degraded; none when it did)", ["mode", "degraded"],
                                registry=registry)
        for mode, degraded in (("hybrid", "none"), ("semantic", "none"), ("text", "none"),
                               *(("text", reason) for reason in search_plan.DEGRADED)):
            self.searches.labels(mode, degraded)  # every series from the start, at 0

    @property
    def unavailable(self) -> str | None:
        """Why the vector half cannot answer now (search_plan's reasons), or None."""
        if self.queries is None or self.index is None:
            return self.off_reason
        return self.index.unavailable

    async def start(self, url: str, pool: Pool, embedder_settings: embedder_config.EmbedderSettings) -> None:
        """Load the embedder (in a thread: the local model takes ~0.5 s) and start keeping the index."""
        try:
            embedder = await asyncio.to_thread(embedder_config.build, embedder_settings, 1)
        except EmbedderUnavailable as exc:
            log.warning("search has no embedder: semantic and hybrid searches answer from text",
                        extra={"embedder": embedder_settings.kind, "error": exc.reason})
            self.off_reason = search_plan.EMBEDDER_UNAVAILABLE
            return
        if embedder is None:
            return
        self.queries = QueryEmbedder(embedder, self.settings.query_timeout)
        self.index = SearchIndex(embedder.model_id, embedder.dimension, self._registry, self.settings.index_dir,
                                 self.settings.save_interval)
        self._task = asyncio.create_task(self.index.run(url, pool, self.settings.poll_interval))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.queries is not None:
            self.queries.close()
