"""The embedding of search queries in the api process: the configured embedder (local by default) runs in a
thread of its own, never on the event loop, with a deadline. A query that waits behind too many others, takes
longer than the deadline or fails is `EmbedderUnavailable`: the search then answers from text (services/api/
search_plan.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Final

import numpy as np
import numpy.typing as npt

from services.core.embedding.protocol import TIMEOUT, Embedder, EmbedderUnavailable

# Queries in flight per process at most (running or queued for the embedding thread): beyond, a search does not
# wait for the model at all. The local model embeds a query in ~5-10 ms of its one thread.
MAX_IN_FLIGHT: Final = 8


class QueryEmbedder:
    def __init__(self, embedder: Embedder, timeout: float, threads: int = 1) -> None:
        self.embedder = embedder
        self.model_id = embedder.model_id
        self._timeout = timeout
        self._executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="walfeed-query-embed")
        self._in_flight = 0
        self._lock = threading.Lock()

    async def embed(self, text: str) -> npt.NDArray[np.float32]:
        with self._lock:
            if self._in_flight >= MAX_IN_FLIGHT:
                raise EmbedderUnavailable(f"{MAX_IN_FLIGHT} query embeddings are in flight already")
            self._in_flight += 1
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._one, text)
        try:
            return await asyncio.wait_for(future, self._timeout)
        except TimeoutError:
            raise EmbedderUnavailable(f"the query's embedding took longer than {self._timeout}s", TIMEOUT) from None

    def _one(self, text: str) -> npt.NDArray[np.float32]:
        try:
            rows = self.embedder.embed([text])
            if rows.shape[0] != 1:
                raise EmbedderUnavailable(f"asked for 1 vector, got {rows.shape[0]}")
            vector: npt.NDArray[np.float32] = rows[0]
            return vector
        finally:
            with self._lock:
                self._in_flight -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
