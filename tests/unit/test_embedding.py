"""services/core/embedding's pure parts: a server's answer is parsed totally (unit rows, or EmbedderUnavailable saying
what is wrong), and the settings name the variable in every error."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.core.embedding import EmbedderUnavailable, config, local
from services.core.embedding.remote import ollama_rows, openai_rows
from services.core.embedding.vectors import matrix, mean_pool, normalise
from services.core.settings import SettingsError

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=9), inner,
                                                                                max_size=3), max_leaves=20)


def test_rows_become_unit_float32_vectors() -> None:
    rows = matrix([[3, 4], [0.0, -2.5]], 2, None)
    assert rows.dtype == np.float32
    np.testing.assert_allclose(rows, [[0.6, 0.8], [0.0, -1.0]], rtol=1e-6)


def test_huge_components_do_not_overflow_the_norm() -> None:
    np.testing.assert_allclose(normalise(np.array([[1e308, 1e308]])), [[math.sqrt(0.5)] * 2], rtol=1e-6)


@pytest.mark.parametrize(("rows", "count", "dimension", "reason"), [
    ({"a": 1}, 1, None, "expected a list of vectors"),
    ([[1.0]], 2, None, "asked for 2 vectors, got 1"),
    ([[1.0, 2.0], [1.0]], 2, None, "vector 1 has 1 dimensions, expected 2"),
    ([[1.0, 2.0]], 1, 3, "vector 0 has 2 dimensions, expected 3"),
    ([[1.0, "2"]], 1, None, "not a finite number: '2'"),
    ([[1.0, True]], 1, None, "not a finite number: True"),
    ([[1.0, float("nan")]], 1, None, "not a finite number: nan"),
    ([[float("inf"), 1.0]], 1, None, "not a finite number: inf"),
    ([[0.0, 0.0]], 1, None, "vector 0 is all zeros"),
    ([[]], 1, None, "vector 0 is not a non-empty list"),
    ([None], 1, None, "vector 0 is not a non-empty list"),
])
def test_wrong_answers_are_refused_with_the_reason(rows: Any, count: int, dimension: int | None, reason: str) -> None:
    with pytest.raises(EmbedderUnavailable, match=reason):
        matrix(rows, count, dimension)


@given(JSON, st.integers(0, 3))
def test_any_answer_is_vectors_or_unavailable(answer: Any, count: int) -> None:
    for rows in (ollama_rows, openai_rows):
        try:
            out = matrix(rows(answer), count, None)
        except EmbedderUnavailable:
            continue
        assert out.shape[0] == count and np.allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_openai_rows_are_put_back_in_input_order() -> None:
    answer = {"data": [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}]}
    assert openai_rows(answer) == [[1.0], [2.0]]
    with pytest.raises(EmbedderUnavailable, match="indexes"):
        openai_rows({"data": [{"index": 1, "embedding": [2.0]}, {"index": 1, "embedding": [1.0]}]})


def test_mean_pooling_ignores_padding() -> None:
    hidden = np.array([[[1.0, 1.0], [3.0, 5.0], [100.0, 100.0]]], dtype=np.float32)
    np.testing.assert_allclose(mean_pool(hidden, np.array([[1, 1, 0]])), [[2.0, 3.0]])


def test_the_default_is_the_local_pinned_model() -> None:
    assert config.EmbedderSettings.from_env({}) == config.EmbedderSettings("local", None, local.MODEL_ID, 10.0)


def test_ollama_defaults_to_its_local_port_and_openai_needs_a_url() -> None:
    ollama = config.EmbedderSettings.from_env({"WALFEED_EMBEDDER": "ollama", "WALFEED_EMBEDDER_MODEL": "all-minilm",
                                               "WALFEED_EMBEDDER_TIMEOUT": "2.5"})
    assert (ollama.url, ollama.model, ollama.timeout) == (config.OLLAMA_URL, "all-minilm", 2.5)
    with pytest.raises(SettingsError, match="WALFEED_EMBEDDER_URL is not set"):
        config.EmbedderSettings.from_env({"WALFEED_EMBEDDER": "openai", "WALFEED_EMBEDDER_MODEL": "m"})
    assert config.build(config.EmbedderSettings.from_env({"WALFEED_EMBEDDER": "off"})) is None


@pytest.mark.parametrize(("environ", "named"), [
    ({"WALFEED_EMBEDDER": "torch"}, "WALFEED_EMBEDDER="),
    ({"WALFEED_EMBEDDER": "ollama"}, "WALFEED_EMBEDDER_MODEL is not set"),
    ({"WALFEED_EMBEDDER_MODEL": "bge-small"}, "WALFEED_EMBEDDER_MODEL='bge-small' is invalid with"),
    ({"WALFEED_EMBEDDER": "openai", "WALFEED_EMBEDDER_MODEL": "m", "WALFEED_EMBEDDER_URL": "ftp://x"},
     "WALFEED_EMBEDDER_URL="),
    ({"WALFEED_EMBEDDER_TIMEOUT": "0"}, "WALFEED_EMBEDDER_TIMEOUT="),
    ({"WALFEED_EMBEDDER_TIMEOUT": "soon"}, "WALFEED_EMBEDDER_TIMEOUT="),
])
def test_invalid_settings_name_the_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        config.EmbedderSettings.from_env(environ)


def test_the_api_key_is_not_in_the_settings_repr() -> None:
    settings = config.EmbedderSettings.from_env({"WALFEED_EMBEDDER": "openai", "WALFEED_EMBEDDER_MODEL": "m",
                                                 "WALFEED_EMBEDDER_URL": "https://api.example.com",
                                                 "WALFEED_EMBEDDER_API_KEY": "sk-secret"})
    assert settings.api_key == "sk-secret" and "sk-secret" not in repr(settings)
