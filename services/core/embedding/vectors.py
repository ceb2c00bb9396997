"""Pure checks and arithmetic on embedding vectors: what a server answered becomes a matrix of unit rows, or
`EmbedderUnavailable` saying what was wrong with it. No I/O here."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from services.core.embedding.protocol import DIMENSION, EmbedderUnavailable, Vectors


def normalise(rows: npt.NDArray[Any]) -> Vectors:
    """Rows scaled to unit length, as float32. A row of zeros (or not finite) has no direction: refused."""
    matrix = np.asarray(rows, dtype=np.float64)
    if matrix.ndim != 2:
        raise EmbedderUnavailable(f"expected a matrix of vectors, got an array of shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise EmbedderUnavailable("a vector has a NaN or infinite component")
    scale = np.abs(matrix).max(axis=1, keepdims=True) if matrix.shape[1] else np.zeros((matrix.shape[0], 1))
    if matrix.shape[0] and not (scale > 0).all():
        raise EmbedderUnavailable(f"vector {int(np.argmin(scale[:, 0]))} is all zeros")
    scaled = matrix / np.where(scale > 0, scale, 1.0)  # no overflow in the norm of huge components
    unit: Vectors = (scaled / np.linalg.norm(scaled, axis=1, keepdims=True)).astype(np.float32)
    return unit


def mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """Sentence vectors as sentence-transformers makes them: the mean of the token vectors the mask keeps."""
    weights = mask[:, :, None].astype(np.float32)
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)  # type: ignore[no-any-return]


def matrix(rows: Any, count: int, dimension: int | None) -> Vectors:
    """`rows` (decoded JSON) as `count` unit vectors of one length, equal to `dimension` when it is known."""
    if not isinstance(rows, list):
        raise EmbedderUnavailable(f"expected a list of vectors, got {type(rows).__name__}")
    if len(rows) != count:
        raise EmbedderUnavailable(f"asked for {count} vectors, got {len(rows)}")
    expected = dimension
    for number, row in enumerate(rows):
        if not isinstance(row, list) or not row:
            raise EmbedderUnavailable(f"vector {number} is not a non-empty list of numbers")
        if expected is None:
            expected = len(row)
        if len(row) != expected:
            raise EmbedderUnavailable(f"vector {number} has {len(row)} dimensions, expected {expected}",
                                      DIMENSION)
        for value in row:
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise EmbedderUnavailable(f"vector {number} has a component that is not a finite number: {value!r}"
                                          [:200])
    if not rows:
        return np.zeros((0, dimension or 0), dtype=np.float32)
    return normalise(np.array(rows, dtype=np.float64))


# How post_embeddings stores a vector (db/init/020_search.sql): float32, little-endian, `dimension` of them.
STORED_DTYPE = np.dtype("<f4")


def to_stored(rows: Vectors) -> list[bytes]:
    """Each row as the bytes of its `vector` column."""
    little = np.ascontiguousarray(rows, dtype=STORED_DTYPE)
    return [row.tobytes() for row in little]


def from_stored(blobs: list[bytes], dimension: int) -> Vectors:
    """Stored vectors of `dimension` as a float32 matrix; a blob of another length is refused (ValueError)."""
    size = dimension * STORED_DTYPE.itemsize
    for number, blob in enumerate(blobs):
        if len(blob) != size:
            raise ValueError(f"stored vector {number} has {len(blob)} bytes, expected {size}")
    if not blobs:
        return np.zeros((0, dimension), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=STORED_DTYPE).reshape(len(blobs), dimension).astype(np.float32)
