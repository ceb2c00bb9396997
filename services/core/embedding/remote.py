"""Embedders behind an HTTP server: Ollama (`POST /api/embed`) and any OpenAI-compatible one
(`POST /v1/embeddings`: llama.cpp, vLLM, LocalAI, OpenAI). The server's answer is untrusted: any transport
failure, HTTP error or answer of the wrong shape, count, type or dimension is `EmbedderUnavailable`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
import orjson

from services.core.embedding import vectors
from services.core.embedding.protocol import CONNECTION, HTTP_STATUS, TIMEOUT, EmbedderUnavailable, Vectors

_PROBE = "dimension probe"


def ollama_rows(answer: Any) -> Any:
    """`{"embeddings": [[...], ...]}` -> the rows (checked by vectors.matrix)."""
    if not isinstance(answer, dict) or "embeddings" not in answer:
        raise EmbedderUnavailable("the answer has no \"embeddings\" field")
    return answer["embeddings"]


def openai_rows(answer: Any) -> Any:
    """`{"data": [{"index": i, "embedding": [...]}, ...]}` -> the rows in input order (by index)."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise EmbedderUnavailable("the answer has no \"data\" list")
    by_index: dict[int, Any] = {}
    for number, item in enumerate(data):
        index = item.get("index", number) if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or "embedding" not in item:
            raise EmbedderUnavailable(f"data[{number}] is not an object with an integer index and an embedding")
        by_index[index] = item["embedding"]
    if sorted(by_index) != list(range(len(data))):
        raise EmbedderUnavailable(f"the indexes of data are not 0..{len(data) - 1}")
    return [by_index[index] for index in range(len(data))]


class _HttpEmbedder:
    _path: str

    def __init__(self, url: str, model: str, timeout: float, api_key: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, headers=headers, transport=transport)
        self._dimension: int | None = None

    @property
    def model_id(self) -> str:
        return f"{self._kind}:{self.model}"

    _kind = ""

    def dimension(self) -> int:
        if self._dimension is None:
            self.embed([_PROBE])
        assert self._dimension is not None
        return self._dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimension or 0), dtype=np.float32)
        answer = self._post({"model": self.model, "input": texts})
        rows = vectors.matrix(self._rows(answer), len(texts), self._dimension)
        self._dimension = rows.shape[1]
        return rows

    def close(self) -> None:
        self._client.close()

    def _rows(self, answer: Any) -> Any:
        raise NotImplementedError

    def _post(self, body: dict[str, Any]) -> Any:
        where = f"{self._client.base_url}{self._path}"
        try:
            response = self._client.post(self._path, content=orjson.dumps(body),
                                         headers={"Content-Type": "application/json"})
        except httpx.TimeoutException:
            raise EmbedderUnavailable(f"{where} did not answer within {self._client.timeout.read}s", TIMEOUT) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise EmbedderUnavailable(f"{where}: {type(exc).__name__}: {exc}", CONNECTION) from None
        if response.status_code != 200:
            raise EmbedderUnavailable(f"{where} answered HTTP {response.status_code}: {response.text[:200]!r}",
                                      HTTP_STATUS)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise EmbedderUnavailable(f"{where} answered something that is not JSON: {response.text[:200]!r}") from None


class OllamaEmbedder(_HttpEmbedder):
    _path = "/api/embed"
    _kind = "ollama"

    def _rows(self, answer: Any) -> Any:
        return ollama_rows(answer)


class OpenAIEmbedder(_HttpEmbedder):
    _path = "/v1/embeddings"
    _kind = "openai"

    def _rows(self, answer: Any) -> Any:
        return openai_rows(answer)
