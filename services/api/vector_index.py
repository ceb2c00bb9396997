"""The api's nearest-neighbour index of one model's post vectors: usearch HNSW, cosine, i8 (docs/adr/0121).
Keys are post ids. Safe to use from several threads: one lock around every call (a search is ~1-5 ms, a batch of
poll changes a few ms; the build happens on an index no request sees yet)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

CONNECTIVITY: Final = 16
EXPANSION_ADD: Final = 128
# Candidates HNSW keeps while searching: ADR 0120 measured recall@1 0.85-0.88 at 64 and 0.996+ at 256 on random
# vectors (the hard case), 2-8 ms; the fused page needs its head right.
EXPANSION_SEARCH: Final = 256
DTYPE: Final = "i8"


class VectorIndex:
    def __init__(self, dimension: int) -> None:
        from usearch.index import Index

        self.dimension = dimension
        self._index = Index(ndim=dimension, metric="cos", dtype=DTYPE, connectivity=CONNECTIVITY,
                            expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._index)

    def memory_bytes(self) -> int:
        return int(self._index.memory_usage)

    def upsert(self, keys: Sequence[int], vectors: npt.NDArray[np.float32]) -> None:
        """Add these posts' vectors, replacing any they had."""
        if not keys:
            return
        ids = np.asarray(keys, dtype=np.uint64)
        with self._lock:
            present = [k for k in ids if self._index.contains(k)]
            if present:
                self._index.remove(np.asarray(present, dtype=np.uint64))
            self._index.add(ids, vectors, threads=1)

    def remove(self, keys: Sequence[int]) -> None:
        """Forget these posts (a missing one is nothing)."""
        if not keys:
            return
        with self._lock:
            self._index.remove(np.asarray(keys, dtype=np.uint64))

    def save(self, path: str) -> None:
        """The index in a file (usearch's format), written whole while searches wait."""
        with self._lock:
            self._index.save(path)

    def load(self, path: str) -> None:
        """This (empty) index replaced by a saved one. Raises on a file usearch cannot read."""
        with self._lock:
            self._index.load(path)
            if self._index.ndim != self.dimension:
                raise ValueError(f"{path} holds vectors of {self._index.ndim} dimensions, not {self.dimension}")

    def search(self, query: npt.NDArray[np.float32], count: int) -> list[tuple[int, float]]:
        """Up to `count` (post id, cosine similarity), most similar first."""
        with self._lock:
            if len(self._index) == 0:
                return []
            found = self._index.search(query, min(count, len(self._index)), threads=1)
        return [(int(k), float(1.0 - d)) for k, d in zip(found.keys, found.distances, strict=True)]
