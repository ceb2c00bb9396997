"""The Ollama and OpenAI-compatible adapters against a real HTTP server on 127.0.0.1 (testkit/embedding_server.py):
a good answer becomes unit rows in input order; every way a server can fail is `EmbedderUnavailable` with the
reason, never another exception. Needs neither Postgres nor RabbitMQ."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import numpy as np
import pytest

from services.core.embedding import EmbedderUnavailable
from services.core.embedding.remote import OllamaEmbedder, OpenAIEmbedder
from testkit.embedding_server import EmbeddingServer, vector

ADAPTERS = [OllamaEmbedder, OpenAIEmbedder]


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer().running() as running:
        yield running


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_good_answer_is_unit_rows_in_input_order(adapter: type[OllamaEmbedder], server: EmbeddingServer) -> None:
    embedder = adapter(server.url, "nomic-embed-text", timeout=5)
    rows = embedder.embed(["one", "two", "three"])
    expected = np.array([vector(t, 8) for t in ("one", "two", "three")])
    assert rows.dtype == np.float32 and rows.shape == (3, 8)
    np.testing.assert_allclose(rows, expected / np.linalg.norm(expected, axis=1, keepdims=True), rtol=1e-6)
    assert embedder.dimension() == 8 and embedder.model_id.endswith(":nomic-embed-text")
    assert server.requests[0][1] == {"model": "nomic-embed-text", "input": ["one", "two", "three"]}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_dimension_is_asked_of_the_server_when_not_yet_known(adapter: type[OllamaEmbedder],
                                                                 server: EmbeddingServer) -> None:
    server.dimension = 5
    assert adapter(server.url, "m", timeout=5).dimension() == 5
    assert len(server.requests) == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_answer_of_another_dimension_than_the_first_is_refused(adapter: type[OllamaEmbedder],
                                                                  server: EmbeddingServer) -> None:
    embedder = adapter(server.url, "m", timeout=5)
    embedder.embed(["a"])
    server.dimension = 7
    with pytest.raises(EmbedderUnavailable, match="7 dimensions, expected 8") as refused:
        embedder.embed(["b"])
    assert refused.value.kind == "dimension"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_slow_server_is_a_timeout(adapter: type[OllamaEmbedder], server: EmbeddingServer) -> None:
    server.mode = "slow"
    with pytest.raises(EmbedderUnavailable, match=r"did not answer within 0\.3s") as refused:
        adapter(server.url, "m", timeout=0.3).embed(["a"])
    assert refused.value.kind == "timeout"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_http_error_is_reported_with_its_status_and_body(adapter: type[OllamaEmbedder],
                                                            server: EmbeddingServer) -> None:
    server.mode = "error"
    with pytest.raises(EmbedderUnavailable, match=r"HTTP 500.*model not loaded") as refused:
        adapter(server.url, "m", timeout=5).embed(["a"])
    assert refused.value.kind == "http-status"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_answer_that_is_not_json_is_refused(adapter: type[OllamaEmbedder], server: EmbeddingServer) -> None:
    server.mode = "garbage"
    with pytest.raises(EmbedderUnavailable, match="not JSON"):
        adapter(server.url, "m", timeout=5).embed(["a"])


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_closed_port_is_a_refused_connection(adapter: type[OllamaEmbedder]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(EmbedderUnavailable, match="ConnectError") as refused:
        adapter(f"http://127.0.0.1:{port}", "m", timeout=5).embed(["a"])
    assert refused.value.kind == "connection"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_no_texts_ask_nothing(adapter: type[OllamaEmbedder], server: EmbeddingServer) -> None:
    assert adapter(server.url, "m", timeout=5).embed([]).shape == (0, 0)
    assert server.requests == []
