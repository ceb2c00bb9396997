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
from services.core.embedding import config as embedder_config
from services.core.embedding.protocol import Embedder, EmbedderUnavailable

log = logging.getLogger(__name__)


class Search:
    def __init__(self, settings: SearchSettings, registry: CollectorRegistry,
                 embedder_settings: embedder_config.EmbedderSettings) -> None:
        self.settings = settings
        self.queries: QueryEmbedder | None = None
        self.index: SearchIndex | None = None
        self.off_reason: str | None = search_plan.EMBEDDER_OFF
        self._task: asyncio.Task[None] | None = None
        self._registry = registry
        self._embedder = self._load(embedder_settings)
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

    def _load(self, embedder_settings: embedder_config.EmbedderSettings) -> Embedder | None:
        """The query embedder, loaded here, in the worker's main thread as the app is made, before the server
        serves or handles signals (the local model: ~0.5 s). Loaded in a thread during the lifespan, a SIGTERM
        arriving meanwhile (the supervisor's death: PR_SET_PDEATHSIG) hung granian's worker for good, its signal
        handler blocked while onnxruntime was imported or its session created, the port still held
        (tests/integration/api/test_process.py)."""
        try:
            return embedder_config.build(embedder_settings, 1)
        except EmbedderUnavailable as exc:
            log.warning("search has no embedder: semantic and hybrid searches answer from text",
                        extra={"embedder": embedder_settings.kind, "error": exc.reason})
            self.off_reason = search_plan.EMBEDDER_UNAVAILABLE
            return None

    async def start(self, url: str, pool: Pool) -> None:
        """Start keeping the index (a background task)."""
        embedder = self._embedder
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
