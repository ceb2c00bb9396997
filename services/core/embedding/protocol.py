"""What a service asks of an embedder, whichever model or server is behind it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


# What kind of failure an EmbedderUnavailable is, for a metric's label (walfeed_embedder_failures_total).
TIMEOUT = "timeout"  # the server did not answer in time (or the api's query deadline passed)
CONNECTION = "connection"  # refused, reset, unresolvable: no answer at all
HTTP_STATUS = "http-status"  # an answer other than 200
DIMENSION = "dimension"  # vectors of another length than before
ANSWER = "answer"  # an answer of the wrong shape, type or count, a NaN, a zero vector
MODEL = "model"  # the local model: not installed, altered, or onnxruntime failing


class EmbedderUnavailable(Exception):
    """The embedder could not embed these texts now: server down, slow or wrong, model file missing or altered.
    `reason` says which, for a log line or an operator; `kind` classifies it (the constants above)."""

    def __init__(self, reason: str, kind: str = ANSWER) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


class Embedder(Protocol):
    @property
    def model_id(self) -> str:
        """Which model makes the vectors: vectors of different model ids are not comparable."""
        ...

    def dimension(self) -> int:
        """Length of every vector. A remote embedder learns it from its first answer (asking one if needed)."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, in order: float32, each of unit length (cosine similarity is a dot product)."""
        ...
