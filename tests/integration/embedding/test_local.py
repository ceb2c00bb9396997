"""The local embedder with the real installed model (the pinned package's weights): its vectors mean something,
and a model file that is not the pinned one is refused. Needs neither Postgres nor RabbitMQ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.core.embedding import EmbedderUnavailable
from services.core.embedding.local import DIMENSION, MODEL_ID, LocalEmbedder, installed_weights


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(threads=1)


def test_a_paraphrase_is_nearer_than_an_unrelated_sentence(embedder: LocalEmbedder) -> None:
    post, paraphrase, unrelated = embedder.embed(["The cat sat on the mat.", "A kitten is resting on a rug.",
                                                  "Stock markets fell sharply today."])
    assert float(post @ paraphrase) > float(post @ unrelated) + 0.3


def test_rows_are_float32_unit_vectors_in_input_order(embedder: LocalEmbedder) -> None:
    texts = ["short", "a much longer post " * 100, "#walfeed meetup on Thursday"]
    rows = embedder.embed(texts)
    assert rows.dtype == np.float32 and rows.shape == (3, DIMENSION) == (3, embedder.dimension())
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(rows[2], embedder.embed([texts[2]])[0], atol=1e-5)  # padding changes nothing
    assert embedder.model_id == MODEL_ID and embedder.embed([]).shape == (0, DIMENSION)


def test_texts_the_tokenizer_cannot_take_are_embedded_or_unavailable(embedder: LocalEmbedder) -> None:
    assert embedder.embed(["lone surrogate \ud800", "", "\x00"]).shape == (3, DIMENSION)
    with pytest.raises(EmbedderUnavailable, match="texts must be strings"):
        embedder.embed([None])  # type: ignore[list-item]


def test_a_weights_file_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    altered = tmp_path / "model.onnx"
    content = bytearray(installed_weights().read_bytes())
    content[-1] ^= 1
    altered.write_bytes(bytes(content))
    with pytest.raises(EmbedderUnavailable, match=r"expected 8199be6f.*not the pinned one"):
        LocalEmbedder(altered)


def test_a_missing_weights_file_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(EmbedderUnavailable, match="cannot read"):
        LocalEmbedder(tmp_path / "absent.onnx")
